"""Prometheus source: PromQL shape and parsing against a fake API, and equality with
merged local aggregates against a real Prometheus scraping two handoffmon processes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from handoffmon.counts import CheckKey, TransitionKey, TurnKey
from handoffmon.depth import DepthBuckets
from handoffmon.pipeline.aggregates import load_counts_sqlite
from handoffmon.refit import refit
from handoffmon.sources import SourceError
from handoffmon.sources.prometheus import PrometheusSource, parse_duration
from tests.conftest import free_port
from tests.sources.fakeprom import fake_prometheus as fake_api

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake_prometheus() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A loopback fake of the Prometheus query API with canned vectors; records queries."""
    with fake_api() as served:
        yield served


def test_snapshot_parses_vectors_into_counts(fake_prometheus) -> None:  # type: ignore[no-untyped-def]
    """Series become Counts keys; float values round; zeros are dropped; turns get a handoff label."""
    url, _ = fake_prometheus
    counts = PrometheusSource(url, clock=lambda: 1700000000.0).snapshot()
    assert counts.checks == {
        CheckKey("json", "b", "a", "3-4", "pass"): 7,
        CheckKey("json", "b", "a", "3-4", "fail"): 3,
    }
    assert counts.transitions == {TransitionKey("json", "b", "true", "pass", "fail"): 4}
    assert counts.turns == {TurnKey("b", "a", "3-4", "true"): 10, TurnKey("b", "unknown", "2", "unknown"): 1}
    assert (
        counts.attributions == {"chain": 9}
        and counts.monitor_errors == {"checker": 2}
        and counts.dropped == 5
    )


def test_queries_sum_over_replicas_at_one_instant(fake_prometheus) -> None:  # type: ignore[no-untyped-def]
    """Every query is `sum by (<key labels>)`, with increase() over the window, all at the same time."""
    url, seen = fake_prometheus
    PrometheusSource(url, window="1h", clock=lambda: 1700000000.0).snapshot()
    queries = {p["query"] for p in seen}
    assert (
        "sum by (rule, model, prefix_model, depth_bucket, verdict) (increase(handoffmon_checks_total[1h]))"
        in queries
    )
    assert "sum(increase(handoffmon_queue_dropped_total[1h]))" in queries
    assert {p["time"] for p in seen} == {"1700000000.000"}
    seen.clear()
    PrometheusSource(url).snapshot()
    assert "sum by (method) (handoffmon_attributions_total)" in {p["query"] for p in seen}


def test_errors_become_source_errors() -> None:
    """Unreachable server, API errors and bad windows raise SourceError naming the cause."""
    with pytest.raises(SourceError, match="cannot reach Prometheus"):
        PrometheusSource(f"http://127.0.0.1:{free_port()}", timeout_s=2).snapshot()
    bad = PrometheusSource("http://x", fetch=lambda url, params: {"status": "error", "error": "boom"})
    with pytest.raises(SourceError, match="boom"):
        bad.snapshot()
    with pytest.raises(SourceError, match="Prometheus duration"):
        PrometheusSource("http://x", window="1 hour")
    assert parse_duration("1h30m") == 5400.0


@pytest.mark.integration
def test_refit_from_prometheus_equals_refit_from_merged_local_aggregates(tmp_path: Path) -> None:
    """Two handoffmon processes, one real Prometheus scraping both: the Prometheus source's
    counts equal the merge of the two processes' persisted aggregates, and so do the refits."""
    from tests.promserver import prometheus_server

    ports, procs, files = [free_port(), free_port()], [], []
    try:
        for seed, port in zip((1, 2), ports, strict=True):
            db = tmp_path / f"replica{seed}.sqlite"
            files.append(db)
            cmd = [sys.executable, "-m", "tests.sources.replica", "--seed", str(seed), "--turns", "1500"]
            cmd += ["--port", str(port), "--sqlite", str(db)]
            proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            procs.append(proc)
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        local = load_counts_sqlite(files[0]).merge(load_counts_sqlite(files[1]))
        with prometheus_server(tmp_path, [f"127.0.0.1:{p}" for p in ports]) as prom:

            def scraped() -> bool:
                total = prom.query("sum(handoffmon_turns_total)")
                return bool(total) and float(total[0]["value"][1]) == 3000

            assert prom.wait_for(scraped, timeout_s=30), prom.log_tail()
            remote = PrometheusSource(prom.url).snapshot()
    finally:
        for proc in procs:
            proc.communicate(timeout=10)
    assert remote.checks == local.checks
    assert remote.transitions == local.transitions
    assert remote.turns == local.turns
    kwargs = {"buckets": DepthBuckets(), "now": 0.0, "source": "x"}
    assert refit(remote, **kwargs).to_json() == refit(local, **kwargs).to_json()  # type: ignore[arg-type]
