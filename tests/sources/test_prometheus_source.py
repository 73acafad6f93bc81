"""Prometheus source: PromQL shape and parsing against a fake API, and equality with
merged local aggregates against a real Prometheus scraping two handoffmon processes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from handoffmon.counts import CellStatKey, CheckKey, ShadowKey, TransitionKey, TurnKey
from handoffmon.depth import DepthBuckets
from handoffmon.pipeline.aggregates import load_counts_sqlite
from handoffmon.refit import refit
from handoffmon.sources import SourceError
from handoffmon.sources.prometheus import PrometheusSource, parse_duration
from handoffmon.sources.spec import infer_buckets, load_source
from tests.conftest import free_port
from tests.promserver import PromServer
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
    assert counts.baseline_checks == {CheckKey("json", "b", "b", "2", "pass"): 4}
    assert counts.cell_stats == {
        CellStatKey("json", "b", "a", "3-4", "depth"): 33,
        CellStatKey("all", "b", "a", "*", "y2"): 12,
    }
    assert counts.shadow == {
        ShadowKey("json", "a", "b", stat): value
        for stat, value in (("prefix_only", 5), ("conversations", 1), ("c2", 25), ("cn", 25), ("n2", 25))
    }
    assert (
        counts.attributions == {"chain": 9}
        and counts.monitor_errors == {"checker": 2}
        and counts.dropped == 5
    )


def test_queries_sum_over_replicas_at_one_instant(fake_prometheus) -> None:  # type: ignore[no-untyped-def]
    """Every totals query is `sum by (<key labels>)`; over a window each metric's raw series
    are read (a subquery of WINDOW_STEPS points), all at the same time."""
    url, seen = fake_prometheus
    counts = PrometheusSource(url, window="1h", clock=lambda: 1700000000.0).snapshot()
    queries = {p["query"] for p in seen}
    assert "handoffmon_checks_total[1h:30000ms]" in queries
    assert "handoffmon_queue_dropped_total[1h:30000ms]" in queries
    assert {p["time"] for p in seen} == {"1700000000.000"}
    assert counts.dropped == 5 and counts.attributions == {"chain": 9}
    seen.clear()
    PrometheusSource(url).snapshot()
    assert "sum by (method) (handoffmon_attributions_total)" in {p["query"] for p in seen}


RESTART = {
    # one cell's stats as a real Prometheus sampled them across a replica restart (seconds
    # before the read; the restart between -10.7 and -7.7): y2 falls, yn does not
    "conversations": [(-11.7, 41), (-10.7, 42), (-7.7, 27), (-3.7, 41), (-0.7, 48)],
    "n2": [(-11.7, 50), (-10.7, 51), (-7.7, 47), (-3.7, 69), (-0.7, 76)],
    "y2": [(-11.7, 37), (-10.7, 38), (-7.7, 36), (-3.7, 55), (-0.7, 60)],
    "yn": [(-11.7, 37), (-10.7, 38), (-7.7, 38), (-3.7, 57), (-0.7, 62)],
}


def test_a_window_shares_each_targets_resets_and_baseline_across_its_series() -> None:
    """A restart is one reset for every series of the scraped process (yn, which never fell,
    counts its new process from 0 like y2: 1 + 62, not increase's 62 - 37 = 25, which read as
    Σy² > Σyn); a series first seen inside the window counts from 0; another target
    without a reset counts from its first sample."""
    at = 1700000000.0
    cell = {"rule": "json", "model": "m1", "prefix_model": "m1", "depth_bucket": "all"}

    def series(instance: str, stat: str, points: list[tuple[float, int]]) -> dict[str, Any]:
        labels = {"__name__": "handoffmon_cell_stats_total", "job": "full", "instance": instance, **cell}
        return {"metric": {**labels, "stat": stat}, "values": [[at + t, str(v)] for t, v in points]}

    result = [series("a:1", stat, points) for stat, points in RESTART.items()]
    result.append(series("b:1", "yn", [(-11.7, 38), (-0.7, 40)]))  # b never restarted
    result.append(series("b:1", "y2", [(-3.7, 3), (-0.7, 4)]))  # born in the window
    seen: list[str] = []

    def fetch(url: str, params: dict[str, str]) -> Any:
        seen.append(params["query"])
        found = result if params["query"].startswith("handoffmon_cell_stats_total[") else []
        return {"status": "success", "data": {"resultType": "matrix", "result": found}}

    counts = PrometheusSource("http://x", window="12s", fetch=fetch, clock=lambda: at).snapshot()
    got = {k.stat: v for k, v in counts.cell_stats.items()}
    assert got == {"conversations": 1 + 48, "n2": 1 + 76, "y2": 1 + 60 + 4, "yn": 1 + 62 + 2}
    assert "handoffmon_cell_stats_total[12s:100ms]" in seen


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


@dataclass
class TwoJobs:
    """One real Prometheus scraping two handoffmon processes as the jobs ``prod`` and ``staging``."""

    prom: PromServer
    files: dict[str, Path]
    """Each process's persisted aggregates (SQLite), by job."""


JOBS = {"prod": (1, 1500), "staging": (2, 700)}
"""job: (seed, turns) of its replica (``tests/sources/replica.py``)."""


@pytest.fixture(scope="module")
def two_jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoJobs]:
    """Started once for the module's two real-Prometheus tests: the replicas import handoffmon and
    count their turns, Prometheus starts and scrapes them (several seconds each time)."""
    from tests.promserver import prometheus_server

    tmp = tmp_path_factory.mktemp("two-jobs")
    procs, files, ports = [], {}, {}
    try:
        for job, (seed, turns) in JOBS.items():
            files[job], ports[job] = tmp / f"{job}.sqlite", free_port()
            cmd = [sys.executable, "-m", "tests.sources.replica", "--seed", str(seed), "--turns", str(turns)]
            cmd += ["--port", str(ports[job]), "--sqlite", str(files[job])]
            proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            procs.append(proc)
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        scrape = [
            {"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
            for job, port in ports.items()
        ]
        with prometheus_server(tmp, [], scrape_configs=scrape) as prom:

            def scraped() -> bool:
                total = prom.query("sum(handoffmon_turns_total)")
                return bool(total) and float(total[0]["value"][1]) == sum(t for _, t in JOBS.values())

            assert prom.wait_for(scraped, timeout_s=30), prom.log_tail()
            yield TwoJobs(prom, files)
    finally:
        for proc in procs:
            proc.communicate(timeout=10)


@pytest.mark.integration
def test_refit_from_prometheus_equals_refit_from_merged_local_aggregates(two_jobs: TwoJobs) -> None:
    """Two handoffmon processes, one real Prometheus scraping both: the Prometheus source's
    counts equal the merge of the two processes' persisted aggregates, and so do the refits."""
    local = load_counts_sqlite(two_jobs.files["prod"]).merge(load_counts_sqlite(two_jobs.files["staging"]))
    remote = PrometheusSource(two_jobs.prom.url).snapshot()
    assert remote.checks == local.checks
    assert remote.transitions == local.transitions
    assert remote.turns == local.turns
    assert remote.baseline_checks == local.baseline_checks and local.baseline_checks
    assert remote.cell_stats == local.cell_stats
    assert {s.stat for s in local.cell_stats} == {"depth", "conversations", "y2", "yn", "n2"}
    kwargs = {"buckets": DepthBuckets(), "now": 0.0, "source": "x"}
    assert refit(remote, **kwargs).to_json() == refit(local, **kwargs).to_json()  # type: ignore[arg-type]


def test_match_selects_one_deployment_in_every_query(fake_prometheus) -> None:  # type: ignore[no-untyped-def]
    """`match` puts its label matchers on every metric, inside the window; malformed selectors,
    metric names and PromQL beyond matchers are refused before any query."""
    url, seen = fake_prometheus
    src = PrometheusSource(url, window="1h", match='{job="prod", namespace=~"llm|llm-eu"}')
    src.snapshot()
    queries = {p["query"] for p in seen}
    assert 'handoffmon_queue_dropped_total{job="prod", namespace=~"llm|llm-eu"}[1h:30000ms]' in queries
    assert all('{job="prod", namespace=~"llm|llm-eu"}' in q for q in queries), queries
    assert src.label == f'{src.base_url}{{job="prod", namespace=~"llm|llm-eu"}}'
    for bad in ('job="prod"', 'up{job="prod"}', "{}", "{job=prod}", '{job="a"} or vector(1)'):
        with pytest.raises(SourceError, match="label selector"):
            PrometheusSource(url, match=bad)
    with pytest.raises(SourceError, match="only applies to a Prometheus source"):
        load_source("cells.csv", match='{job="prod"}')


@pytest.mark.integration
def test_match_reads_one_of_two_jobs_from_a_real_prometheus(two_jobs: TwoJobs, tmp_path: Path) -> None:
    """Two handoffmon processes scraped as two jobs (prod, staging) by one real Prometheus:
    `--match '{job="prod"}'` reads exactly prod's persisted counts, through PrometheusSource,
    `handoffmon refit` and `handoffmon shapes export`; without it both deployments are summed."""
    from click.testing import CliRunner

    from handoffmon.cli import main

    prom, files = two_jobs.prom, two_jobs.files
    prod = PrometheusSource(prom.url, match='{job="prod"}').snapshot()
    everything = PrometheusSource(prom.url).snapshot()
    source = f"prometheus://{prom.url[len('http://') :]}"

    def cli(*args: str, match: str, out: str) -> Any:
        return CliRunner().invoke(main, [*args, "--match", match, "--out", str(tmp_path / out)])

    res = cli("refit", "--source", source, match='{job="prod"}', out="refit.json")
    assert res.exit_code == 0, res.output
    shapes = cli("shapes", "export", "--source", prom.url, match='{job="staging"}', out="shapes.json")
    assert shapes.exit_code == 0, shapes.output
    nothing = cli("refit", "--source", prom.url, match='{job="dev"}', out="x.json")
    local = {job: load_counts_sqlite(path) for job, path in files.items()}
    assert (prod.checks, prod.transitions, prod.turns) == (
        local["prod"].checks,
        local["prod"].transitions,
        local["prod"].turns,
    )
    both = local["prod"].merge(local["staging"])
    assert everything.checks == both.checks and everything.checks != prod.checks
    buckets = infer_buckets(local["prod"])  # what the CLI does without --config
    expected = json.loads(refit(local["prod"], buckets=buckets, now=0.0, source="x").to_json())
    written = json.loads((tmp_path / "refit.json").read_text(encoding="utf-8"))
    assert written["source"].endswith('{job="prod"}')
    assert written["rules"] == expected["rules"]
    exported = json.loads((tmp_path / "shapes.json").read_text(encoding="utf-8"))
    assert exported["source"].endswith('{job="staging"}')
    assert nothing.exit_code == 4, nothing.output  # a selector matching nothing is no data, not success
