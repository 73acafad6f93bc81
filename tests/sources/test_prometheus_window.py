"""``--window`` against a real Prometheus scraping live traffic across a restart: the window
read (one reset and baseline per scraped process, ``sources.prometheus.window_increases``)
and the refit's input check (``refit.inputs``) repair no healthy cell (series born inside the
window, the restart, conversations straddling the window's start) and repair what breaks,
here a cell's ``n2`` series dropped by a ``metric_relabel_configs`` rule as a user might write
one. Read with ``increase``, whose reset detection is per series, a healthy cell's Σy² came
out above its Σyn in about 1 run in 5 (a stat whose new count reached its old one by the
first scrape after the restart lost its whole old count)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from handoffmon.depth import DepthBuckets
from handoffmon.refit import RefitResult, refit
from handoffmon.sources.prometheus import PrometheusSource
from handoffmon.sources.spec import infer_buckets
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]


def _replica(port: int, seed: int, db: Path) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "tests.sources.replica", "--seed", str(seed), "--turns", "300"]
    cmd += ["--port", str(port), "--sqlite", str(db), "--stream-per-s", "40", "--shadow-rate", "1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


@pytest.fixture(scope="module")
def window_reads(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RefitResult, RefitResult, RefitResult]]:
    """One replica streaming 40 turns/s, each shadowed, restarted half-way (its counters
    reset, its conversations restart as new clusters), scraped every second by two jobs of one
    Prometheus: ``full`` as is, ``cut`` without the n2 series of cell json m1->m2 and of its
    shadow pair cell. Yields the windowed refits of both (job selected by --match) and the
    counter totals of ``full``."""
    from tests.promserver import prometheus_server

    tmp = tmp_path_factory.mktemp("window")
    port = free_port()
    target = {"static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
    drop = {
        "source_labels": ["__name__", "rule", "prefix_model", "model", "stat"],
        "regex": "handoffmon_(cell_stats|shadow_pair_stats)_total;json;m1;m2;n2",
        "action": "drop",
    }
    scrape = [{"job_name": "full", **target}, {"job_name": "cut", **target, "metric_relabel_configs": [drop]}]
    proc = _replica(port, 1, tmp / "a.sqlite")
    try:
        with prometheus_server(tmp, [], scrape_configs=scrape) as prom:
            time.sleep(8)
            proc.communicate("", timeout=10)
            proc = _replica(port, 2, tmp / "b.sqlite")  # a restart: fresh counters and state
            time.sleep(8)
            reads = []
            for job, window in (("full", "12s"), ("cut", "12s"), ("full", None)):
                src = PrometheusSource(prom.url, window=window, match=f'{{job="{job}"}}')
                counts = src.snapshot()
                buckets = infer_buckets(counts) if counts.checks else DepthBuckets()
                reads.append(refit(counts, buckets=buckets, source=src.label, window_s=src.window_s))
            yield reads[0], reads[1], reads[2]
    finally:
        proc.communicate("", timeout=10)


@pytest.mark.integration
@pytest.mark.slow
def test_a_windowed_read_across_a_restart_needs_no_repair(window_reads: tuple[RefitResult, ...]) -> None:
    """And the counter totals read while turns stream in (a scrape between a turn's increments
    of two series) need none either."""
    full, _, totals = window_reads
    assert full.clustered and full.rules["json"].pairs
    assert full.input_repaired_cells == 0, full.input_repairs[:3]
    assert totals.input_repaired_cells == 0, totals.input_repairs[:3]
    # the shadow pairs' sums too (their tables' series are born in the window as well)
    assert len(full.rules["json"].switch_costs) >= 8 and len(totals.rules["all"].switch_costs) >= 8
    assert full.shadow_input_repaired_cells == 0, full.shadow_input_repairs[:3]
    assert totals.shadow_input_repaired_cells == 0, totals.shadow_input_repairs[:3]


@pytest.mark.integration
@pytest.mark.slow
def test_a_series_dropped_by_relabeling_is_repaired_in_that_cell_only(
    window_reads: tuple[RefitResult, ...],
) -> None:
    _, cut, _ = window_reads
    cells = {(r.rule, r.prefix_model, r.model) for r in cut.input_repairs}
    assert cells == {("json", "m1", "m2")}, cut.input_repairs
    assert cut.input_repairs[0].n2 == 0 and cut.input_repairs[0].action == "one_conversation"
    pairs = {(r.rule, r.prefix_model, r.model) for r in cut.shadow_input_repairs}
    assert pairs == {("json", "m1", "m2")}, cut.shadow_input_repairs
    assert cut.shadow_input_repairs[0].n2 == 0 and "pairs <= n2" in cut.shadow_input_repairs[0].violated
