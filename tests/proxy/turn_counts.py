"""What the serve API tests read off a running proxy: snapshot deltas, expected turn cells, samples."""

from __future__ import annotations

from collections import Counter
from typing import Any

from handoffmon.counts import TurnKey
from handoffmon.depth import DepthBuckets
from handoffmon.pipeline.aggregates import handoff_label
from tests.proxy.conftest import Proxy


def snapshot(proxy: Proxy) -> Any:
    """The proxy's counts once its pipeline has drained."""
    assert proxy.monitor.flush(10)
    return proxy.monitor.snapshot()


def delta(after: dict[Any, int], before: dict[Any, int]) -> Counter[Any]:
    """``after - before``, zero entries dropped."""
    c = Counter(after)
    c.subtract(before)
    return +c


def expected_turns(authors: list[str]) -> Counter[TurnKey]:
    """Turn cells of one conversation whose assistant turns were written by ``authors``."""
    buckets, out = DepthBuckets(), Counter[TurnKey]()
    for i, model in enumerate(authors):
        prefix = authors[i - 1] if i else "none"
        handoff = handoff_label(prefix != model) if i else "false"
        out[TurnKey(model, prefix, buckets.bucket(i + 1), handoff)] += 1
    return out


def sample(proxy: Proxy, name: str, labels: dict[str, str]) -> float:
    """A sample of the proxy's registry (0 when absent)."""
    return proxy.registry.get_sample_value(name, labels) or 0.0
