"""Two ``PrometheusExporter``s in one process under PROMETHEUS_MULTIPROC_DIR (two runtimes or two
wrapped routers in a gunicorn worker) count into the files without losing each other's counts."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import generate_latest

from handoffmon.exporters.serving import multiprocess_registry
from tests.exporters.turns import L, counted, only, parse_exposition
from tests.exporters.workers import worker_said


def test_two_exporters_of_one_process_add_up(tmp_path: Path) -> None:
    """Each prometheus_client value writes its own running total into its process's file entry, so
    two exporters with their own metrics overwrote each other: 3 turns through each read 4, two
    errors read 1. A second process adds its own on top."""
    worker_said(tmp_path, "mp_two_exporters_worker", "3")
    worker_said(tmp_path, "mp_two_exporters_worker", "2")
    s = parse_exposition(generate_latest(multiprocess_registry(str(tmp_path))).decode())
    turns = only(s, "handoffmon_turns_total")
    assert turns == {L(model="gpt", prefix_model="none", depth_bucket="1"): 2 * 3 + 2 * 2}
    checks = counted(s, "handoffmon_checks_total")
    cell = {"rule": "json", "model": "gpt", "prefix_model": "none", "depth_bucket": "1"}
    assert checks[L(**cell, verdict="fail")] == 2 * 2 + 2 * 1  # i = 0, 2 and i = 0
    assert checks[L(**cell, verdict="pass")] == 2 * 1 + 2 * 1
    assert counted(s, "handoffmon_monitor_errors_total") == {L(stage="check"): 4}
    assert only(s, "handoffmon_overhead_seconds_count") == {L(stage="attribution"): 4}
