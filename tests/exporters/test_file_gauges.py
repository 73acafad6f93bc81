"""Scrape-time gauges under PROMETHEUS_MULTIPROC_DIR: the routing table's age and the shadow
budget, breaker and pending gauges reach a multiprocess ``/metrics`` (``FileMirror.file_gauges``),
combined over live workers; they were absent there, so a LiteLLM Proxy or ``serve`` with several
workers showed "No data" on those panels and RoutingTableStale's table-age signal could not fire."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily

from handoffmon.exporters import serving
from handoffmon.exporters.serving import mark_process_dead, multiprocess_registry
from tests.exporters.turns import L, only, parse_exposition
from tests.exporters.workers import worker_said


def scrape(mp_dir: Path) -> Any:
    return parse_exposition(generate_latest(multiprocess_registry(str(mp_dir))).decode())


def test_gauges_of_live_workers_are_combined_and_a_dead_workers_go(tmp_path: Path) -> None:
    """Two real worker processes, each with two runtimes' shadow collectors: the table age is
    the oldest live worker's, budgets and pending calls add up over runtimes and workers, a
    breaker reads open while any live worker's is; a worker marked dead drops out of all four."""
    old = int(worker_said(tmp_path, "mp_file_gauge_worker", "7200", "5", "1"))
    worker_said(tmp_path, "mp_file_gauge_worker", "120", "2", "0")
    s = scrape(tmp_path)
    assert only(s, "handoffmon_routing_table_age_seconds") == {L(): 7200.0}
    oldest = only(s, "handoffmon_routing_table_timestamp_seconds")[L()]
    assert 7200.0 <= time.time() - oldest < 7260.0  # the older table's refit time
    assert only(s, "handoffmon_shadow_budget_used") == {
        L(window="calls"): 5 + 1 + 2 + 1,
        L(window="tokens"): 10 * (5 + 1 + 2 + 1),
    }
    limit = only(s, "handoffmon_shadow_budget_limit")
    assert limit[L(window="calls")] == 4 * 60.0
    assert math.isinf(limit[L(window="usd")])
    assert only(s, "handoffmon_shadow_breaker_open") == {L(target="model-b"): 1.0}
    assert only(s, "handoffmon_shadow_pending") == {L(): 5 + 1 + 2 + 1}
    # the counters still sum, dead workers included
    assert only(s, "handoffmon_routing_decisions_total") == {L(mode="enforce", outcome="reordered"): 2}

    mark_process_dead(old, str(tmp_path))  # gunicorn's child_exit hook
    s = scrape(tmp_path)
    assert only(s, "handoffmon_routing_table_age_seconds") == {L(): 120.0}
    assert 120.0 <= time.time() - only(s, "handoffmon_routing_table_timestamp_seconds")[L()] < 180.0
    assert only(s, "handoffmon_shadow_budget_used")[L(window="calls")] == 2 + 1
    assert only(s, "handoffmon_shadow_breaker_open") == {L(target="model-b"): 0.0}
    assert only(s, "handoffmon_routing_decisions_total") == {L(mode="enforce", outcome="reordered"): 2}


class Gauges:
    """A collector with mirrored gauges whose values the test sets."""

    file_gauges: ClassVar[Mapping[str, str]] = {
        "test_mirror_sum": "livesum",
        "test_mirror_max": "livemax",
        "test_mirror_min": "livemin",
    }

    def __init__(self, values: dict[str, dict[str, float]]) -> None:
        self.values = values

    def collect(self) -> Any:
        for name, by_key in self.values.items():
            family = GaugeMetricFamily(name, "test", labels=["k"])
            for key, value in by_key.items():
                family.add_metric([key], value)
            yield family


def written(name: str) -> dict[str, float]:
    gauge = serving._file_gauges[name][0]
    return {s.labels["k"]: s.value for m in gauge.collect() for s in m.samples}


def test_one_process_combines_its_mirrors_and_zeroes_what_went_away() -> None:
    """In one process (no files here: the process-local values a file would hold) the mirrors of
    several collectors are combined per series by the gauge's mode, the way each file holds one
    value per series and process; a series no mirror reports any more is written 0, so a closed
    runtime's pending calls or open breaker do not linger, and a minimum (a table's timestamp)
    +Inf, which leaves other processes' values as they are (0 would be the oldest table of all)."""
    a = Gauges(
        {
            "test_mirror_sum": {"x": 2.0, "y": 1.0},
            "test_mirror_max": {"x": 0.0},
            "test_mirror_min": {"x": 5.0},
        }
    )
    b = Gauges({"test_mirror_sum": {"x": 3.0}, "test_mirror_max": {"x": 1.0}, "test_mirror_min": {"x": 7.0}})
    ma, mb = serving.FileMirror(a), serving.FileMirror(b)
    assert serving.sync_file_mirrors() is None
    assert written("test_mirror_sum") == {"x": 5.0, "y": 1.0}
    assert written("test_mirror_max") == {"x": 1.0}
    assert written("test_mirror_min") == {"x": 5.0}
    b.values = {"test_mirror_sum": {}, "test_mirror_max": {}, "test_mirror_min": {}}
    a.values["test_mirror_sum"]["x"] = 4.0
    assert serving.sync_file_mirrors() is None
    assert written("test_mirror_sum") == {"x": 4.0, "y": 1.0}
    assert written("test_mirror_max") == {"x": 0.0}
    assert written("test_mirror_min") == {"x": 5.0}
    a.values = {"test_mirror_sum": {}, "test_mirror_max": {}, "test_mirror_min": {}}
    ma.sync()  # one mirror's own sync writes every mirror's gauges too
    assert written("test_mirror_sum") == {"x": 0.0, "y": 0.0}
    assert written("test_mirror_min") == {"x": math.inf}
    assert mb is not None


def test_an_unknown_gauge_mode_is_refused() -> None:
    class Bad:
        file_gauges: ClassVar[Mapping[str, str]] = {"test_mirror_bad": "all"}

        def collect(self) -> Any:
            return iter(())

    with pytest.raises(ValueError, match="unknown modes \\['all'\\]"):
        serving.FileMirror(Bad())
