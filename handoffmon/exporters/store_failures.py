"""``handoffmon_store_failures_total{op, kind}``: the store guard's failure counters, read at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector


class StoreStatsCollector(Collector):
    """Exposes a store's ``stats()`` as ``handoffmon_store_failures_total{op, kind}`` at scrape time.

    ``kind`` is ``errors`` (the backend failed) or ``skipped`` (not tried while the
    store was backing off after a failure). Reads counters only; adds nothing to the
    request path.
    """

    def __init__(self, stats: Callable[[], dict[str, int]]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "handoffmon_store_failures",
            "Attribution store operations that failed or were skipped (fail-open), by op and kind.",
            labels=["op", "kind"],
        )
        for name, value in sorted(self._stats().items()):
            op, _, kind = name.rpartition("_")
            family.add_metric([op, kind], value)
        yield family
