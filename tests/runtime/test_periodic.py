"""PeriodicRefit: publishes results, counts failures without raising, runs on its thread."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from handoffmon.counts import Counts
from handoffmon.depth import DepthBuckets
from handoffmon.refit.result import RefitResult
from handoffmon.runtime.periodic import PeriodicRefit
from tests.refit.synth import plant, synth_counts


def _counts() -> Counts:
    rng = np.random.default_rng(0)
    return synth_counts(plant(3, 1, rng), rng, n_pair=100, n_trans=20)


def test_run_once_publishes_a_result_stamped_by_the_clock() -> None:
    """One refit: snapshot → refit → publish, created_at from the injected clock."""
    published: list[RefitResult] = []
    counts = _counts()
    job = PeriodicRefit(lambda: counts, published.append, 60, buckets=DepthBuckets(), clock=lambda: 123.0)
    result = job.run_once()
    assert result is not None and published == [result]
    assert result.created_at == 123.0 and "r0" in result.rules
    assert job.stats.runs == 1 and job.stats.failures == 0 and job.stats.last_success_at == 123.0


def test_failures_are_counted_never_raised() -> None:
    """A failing snapshot or publisher is counted with its error and reported to on_failure; None returned."""

    def broken() -> Counts:
        raise RuntimeError("store down")

    def bad_publish(_: RefitResult) -> None:
        raise ValueError("gauge error")

    reported: list[int] = []
    job = PeriodicRefit(
        broken, lambda r: None, 60, buckets=DepthBuckets(), on_failure=lambda: reported.append(1)
    )
    assert job.run_once() is None
    assert reported == [1]
    counts = _counts()
    job2 = PeriodicRefit(lambda: counts, bad_publish, 60, buckets=DepthBuckets())
    assert job2.run_once() is None
    assert job.stats.failures == 1 and "store down" in (job.stats.last_error or "")
    assert job2.stats.failures == 1 and "gauge error" in (job2.stats.last_error or "")


def test_thread_refits_every_interval_until_stopped() -> None:
    """start() refits periodically in the background; stop() ends the thread."""
    done = threading.Event()
    seen: list[RefitResult] = []
    counts = _counts()

    def publish(r: RefitResult) -> None:
        seen.append(r)
        if len(seen) >= 2:
            done.set()

    job = PeriodicRefit(lambda: counts, publish, 0.05, buckets=DepthBuckets())
    job.start()
    try:
        assert done.wait(10.0)
    finally:
        job.stop()
    n = job.stats.runs
    assert n >= 2 and not any(t.name == "handoffmon-refit" and t.is_alive() for t in threading.enumerate())


def test_publisher_returning_false_counts_as_failure() -> None:
    """publish_refit-style False is a failed refit in the stats (and not a crash)."""
    counts = _counts()
    job = PeriodicRefit(lambda: counts, lambda r: False, 60, buckets=DepthBuckets())
    assert job.run_once() is None and job.stats.failures == 1


def test_failed_refit_is_counted_as_monitor_error_stage_refit() -> None:
    """A refit that raises is exported as `handoffmon_monitor_errors_total{stage="refit"}`
    (RefitFailing and the dashboard read it) and never raises into the caller."""
    from prometheus_client import generate_latest

    from handoffmon.config import HandoffmonConfig
    from handoffmon.runtime import build_runtime

    with build_runtime(HandoffmonConfig(refit={"interval_s": 60}), registry=None, start=False) as rt:
        periodic = rt.refit
        assert periodic is not None
        periodic._snapshot = lambda: (_ for _ in ()).throw(RuntimeError("store gone"))  # type: ignore[method-assign]
        assert rt.refit_now() is None
        assert periodic.run_once() is None
        rt.flush()
        text = generate_latest(rt.registry).decode()
    assert 'handoffmon_monitor_errors_total{stage="refit"} 2.0' in text
    assert periodic.stats.failures == 2


def test_a_refit_slower_than_its_interval_is_followed_by_a_pause_as_long() -> None:
    """interval 0.05 s, each refit ~0.25 s: the thread waited only the interval between
    refits, so a slow refit kept a core ~85% busy; the pause after a refit is now at least as
    long as the refit took (at most half a core)."""
    counts = _counts()
    spans: list[tuple[float, float]] = []
    done = threading.Event()

    def slow_snapshot() -> Counts:
        started = time.monotonic()
        while time.monotonic() - started < 0.25:  # a refit's CPU cost, simulated
            pass
        spans.append((started, 0.0))
        return counts

    def publish(_: RefitResult) -> None:
        spans[-1] = (spans[-1][0], time.monotonic())
        if len(spans) >= 3:
            done.set()

    job = PeriodicRefit(slow_snapshot, publish, 0.05, buckets=DepthBuckets())
    job.start()
    try:
        assert done.wait(20.0)
    finally:
        job.stop()
    for (start, end), (next_start, _) in itertools.pairwise(spans):
        assert next_start - end >= end - start - 0.01, spans


def test_a_multiprocess_runtime_refits_every_workers_counts_from_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``PROMETHEUS_MULTIPROC_DIR`` the periodic refit reads the directory (every worker's
    counters, ``sources.multiprocess.multiprocess_counts``), not this worker's
    ``monitor.snapshot``; a directory that cannot be read is a failed refit, counted, never
    raised. Without it: the local counts.
    (tests/exporters/test_serving.py checks the sums with two real worker processes.)"""
    from handoffmon.runtime import build_runtime
    from tests.pipeline.helpers import make_config, run_conversation

    config = make_config(refit={"interval_s": 60})
    with build_runtime(config, registry=None) as rt:
        run_conversation(rt.monitor, ["gpt", "gpt"])
        assert rt.flush(30)
        result = rt.refit_now()
        assert result is not None and result.source == "local"
    where = tmp_path / "multiproc"
    where.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(where))
    with build_runtime(config, registry=None) as rt:
        # this process's prometheus_client chose its values before the variable was set, so its
        # turns are not in the files: the directory read holds no checks, and nothing is published
        run_conversation(rt.monitor, ["gpt", "gpt"])
        assert rt.flush(30)
        assert rt.refit is not None and rt.refit_now() is None
        assert (rt.refit.stats.empty_runs, rt.refit.stats.failures) == (1, 0)
        monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "elsewhere"))
        assert rt.refit_now() is None  # the directory is the one the runtime was built with: read
        assert (rt.refit.stats.empty_runs, rt.refit.stats.failures) == (2, 0)
        for f in where.iterdir():
            f.unlink()
        where.rmdir()
        assert rt.refit_now() is None
        assert (rt.refit.stats.empty_runs, rt.refit.stats.failures) == (2, 1)


def test_a_multiprocess_runtime_on_sqlite_refits_the_shared_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``PROMETHEUS_MULTIPROC_DIR`` with the SQLite store, the refit reads the aggregates'
    file, which every worker writes and which keeps the history a restart wipes from the
    directory: another worker's turns written there, and ones from before a restart, are in
    the refit; the directory alone would have neither."""
    from handoffmon.pipeline.aggregates import Aggregates
    from handoffmon.runtime import build_runtime
    from tests.pipeline.helpers import make_config, run_conversation

    db = tmp_path / "h.db"
    where = tmp_path / "multiproc"
    where.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(where))
    config = make_config(refit={"interval_s": 60}, store={"backend": "sqlite", "path": str(db)})
    with build_runtime(config, registry=None, start=False) as before:  # a worker before the restart
        before.start()
        for i in range(3):
            run_conversation(before.monitor, ["gpt", "gpt"], user=f"before {i}")
        assert before.flush(30)
    for f in where.iterdir():  # LiteLLM empties the directory at start
        f.unlink()
    with build_runtime(config, registry=None) as rt:
        other = Aggregates(str(db))  # another live worker's aggregates, sharing the file
        other.add_counts(Aggregates(str(db)).snapshot())  # as many turns again
        other.close()
        assert rt.refit is not None
        read = rt.refit._snapshot()  # what the periodic refit reads
        assert read.total_turns == 2 * 3 * 2, read.total_turns  # 3 conversations × 2 turns, twice
        assert rt.monitor.snapshot().total_turns == 3 * 2  # this worker's own view: its file at start
        result = rt.refit_now()
        assert result is not None and result.source == "sqlite"


def test_a_snapshot_with_no_checks_is_neither_refitted_nor_published() -> None:
    """A fresh process before its first checked turn: nothing is published (a refit of nothing
    stamped a refit success and published an empty pair-risk table), nothing counts as a failure;
    the first snapshot with checks is refitted and published as usual."""
    published: list[RefitResult] = []
    failed: list[int] = []
    counts = _counts()
    empty = Counts(checks={key: 0 for key in counts.checks})  # keys that count no check
    current = [Counts(), empty]
    job = PeriodicRefit(
        lambda: current[0], published.append, 60, buckets=DepthBuckets(), on_failure=lambda: failed.append(1)
    )
    assert job.run_once() is None
    current[0] = empty
    assert job.run_once() is None
    assert published == [] and failed == []
    stats = job.stats
    assert (stats.runs, stats.empty_runs, stats.failures, stats.last_success_at) == (2, 2, 0, None)
    current[0] = counts
    result = job.run_once()
    assert result is not None and published == [result]
    assert job.stats.runs == 3 and job.stats.empty_runs == 2 and job.stats.last_success_at is not None


@pytest.mark.parametrize("damage", [False, True])
def test_a_monitors_own_snapshot_repairs_damaged_shadow_sums_and_reports_them(damage: bool) -> None:
    """The in-process refit of a monitor's own counts (memory store) is approximate: its counts
    start with the process while conversation state may be older (Redis), so cluster sums it
    cannot reconcile are repaired and listed (``shadow_input_repairs``), the run succeeds and
    publishes; healthy shadow sums are neither refused nor repaired."""
    from handoffmon.config import HandoffmonConfig
    from handoffmon.runtime import build_runtime
    from tests.refit.test_shadow_inputs import damaged, shadowed_counts

    counts = shadowed_counts()
    cell = ("all", "a", "b")
    shadow = damaged(counts, cell, conversations=None).shadow if damage else counts.shadow
    config = HandoffmonConfig(refit={"interval_s": 60, "min_n": 5})
    with build_runtime(config, registry=None, start=False) as rt:
        assert rt.refit is not None and not rt.refit.exact
        rt.monitor.aggregates.add_counts(counts)
        rt.monitor.aggregates.add_shadow(shadow)
        result = rt.refit_now()
        assert result is not None and result.source == "local" and rt.refit.stats.failures == 0
        assert result.rules["all"].switch_costs
        assert result.shadow_input_repaired_cells == int(damage)
        if damage:
            (repair,) = result.shadow_input_repairs
            assert (repair.rule, repair.prefix_model, repair.model) == cell and repair.conversations == 0
