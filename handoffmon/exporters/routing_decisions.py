"""``handoffmon_routing_decisions_total{mode, outcome}`` and the routing table's age, read at scrape time."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import ClassVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from handoffmon.exporters.serving import mirror_to_files


class RoutingCollector(Collector):
    """Exposes the routing policy's decision counters and the age of its pair-risk table.

    ``mode`` is ``dry_run`` or ``enforce``, ``outcome`` one of ``routing.OUTCOMES``: both
    bounded. The table age and its timestamp are absent until a refit published a table. Reads
    counters only; adds nothing to the request path. Under ``PROMETHEUS_MULTIPROC_DIR`` the
    decisions and the table's age and timestamp are also written to the files (``FileMirror``): a
    multiprocess ``/metrics`` sums the decisions over workers and serves the oldest live worker's
    table. Its age there is as of the worker's last write (at most ``FILE_REFRESH_S`` ago while
    the worker's exporter is up); ``time() - handoffmon_routing_table_timestamp_seconds`` is the
    age at query time, whatever the worker does.

    Args:
        counts: returns decisions by (mode, outcome).
        table_age_s: returns the table's age in seconds given the time now (None: no table).
        clock: wall clock.
        files: also write the series to the multiprocess files (``PROMETHEUS_MULTIPROC_DIR``).
    """

    file_gauges: ClassVar[Mapping[str, str]] = {
        "handoffmon_routing_table_age_seconds": "livemax",
        "handoffmon_routing_table_timestamp_seconds": "livemin",
    }
    """Gauges a multiprocess ``/metrics`` serves (``FileMirror``): the oldest live worker's table."""

    def __init__(
        self,
        counts: Callable[[], Mapping[tuple[str, str], int]],
        table_age_s: Callable[[float], float | None],
        *,
        clock: Callable[[], float] = time.time,
        files: bool = True,
    ) -> None:
        self._counts = counts
        self._age = table_age_s
        self._clock = clock
        # files=False: read by OpenTelemetry only, with Prometheus off (nothing to write for it)
        self._files = mirror_to_files(self) if files else None

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "handoffmon_routing_decisions",
            "Risk-aware fallback ordering decisions by mode (dry_run, enforce) and outcome "
            "(reordered and home changed or would have changed the router's order).",
            labels=["mode", "outcome"],
        )
        for (mode, outcome), value in sorted(self._counts().items()):
            family.add_metric([mode, outcome], value)
        yield family
        now = self._clock()
        age = self._age(now)
        if age is not None:
            yield GaugeMetricFamily(
                "handoffmon_routing_table_age_seconds",
                "Seconds since the refit behind the routing policy's pair-risk table.",
                value=age,
            )
            yield GaugeMetricFamily(
                "handoffmon_routing_table_timestamp_seconds",
                "UNIX time of the refit behind the routing policy's pair-risk table (its age at "
                "query time: time() minus this).",
                value=now - age,
            )
