"""A ``PROMETHEUS_MULTIPROC_DIR`` as a source: handoffmon's counters summed over every worker
process that writes the directory (LiteLLM Proxy ``--num_workers``, gunicorn), read through
prometheus_client's ``MultiProcessCollector`` and mapped to ``Counts`` as ``PrometheusSource``
maps Prometheus' sums of them. The periodic refit of a multiprocess worker reads this."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

from handoffmon.counts import Counts
from handoffmon.sources import SourceError
from handoffmon.sources.prometheus import PrometheusSource

_SUM_QUERY = re.compile(r"^sum(?: by \(([^)]*)\))? ?\(([a-zA-Z_:][a-zA-Z0-9_:]*)\)$")
"""The queries ``PrometheusSource`` sends without a window or selector: ``sum by (a, b) (metric)``
or ``sum(metric)``."""


def multiprocess_counts(path: str | None = None) -> Counts:
    """handoffmon's counters summed over every process that writes ``path`` (default
    ``$PROMETHEUS_MULTIPROC_DIR``), dead workers included: what a refit of the whole deployment
    reads, where a worker's own ``monitor.snapshot()`` holds only the turns that worker served.

    The files are read once through prometheus_client's ``MultiProcessCollector`` and the
    counters mapped to ``Counts`` exactly as ``PrometheusSource`` maps Prometheus' sums of them.

    Raises:
        SourceError: the directory cannot be read.
    """
    from prometheus_client.multiprocess import MultiProcessCollector

    where = path if path is not None else os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not where:
        raise SourceError("no multiprocess directory: pass one or set PROMETHEUS_MULTIPROC_DIR")
    try:
        families = list(MultiProcessCollector(None, path=where).collect())  # type: ignore[no-untyped-call]
    except (OSError, ValueError) as exc:
        raise SourceError(f"cannot read the multiprocess directory {where}: {exc}") from exc
    return counts_from_families(families, f"file://{where}")


def counts_from_families(families: Iterable[Any], label: str) -> Counts:
    """handoffmon's counters among prometheus_client metric ``families`` (a registry's
    ``collect()``), mapped to ``Counts`` by ``PrometheusSource`` as it maps Prometheus' sums of
    them; ``label`` names the source in its errors."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in families:
        if family.name.startswith("handoffmon_"):
            for s in family.samples:
                samples.setdefault(s.name, []).append((s.labels, s.value))

    def fetch(url: str, params: dict[str, str]) -> dict[str, Any]:
        match = _SUM_QUERY.match(params["query"])
        if match is None:  # pragma: no cover - PrometheusSource sends no other query here
            raise SourceError(f"unexpected query {params['query']!r}")
        by = tuple(b.strip() for b in match.group(1).split(",")) if match.group(1) else ()
        sums: dict[tuple[str, ...], float] = {}
        for labels, value in samples.get(match.group(2), ()):
            key = tuple(labels.get(b, "") for b in by)
            sums[key] = sums.get(key, 0.0) + value
        result = [{"metric": dict(zip(by, k, strict=True)), "value": [0, repr(v)]} for k, v in sums.items()]
        return {"status": "success", "data": {"resultType": "vector", "result": result}}

    return PrometheusSource(label, fetch=fetch).snapshot()
