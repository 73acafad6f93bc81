"""PeriodicRefit: publishes results, counts failures without raising, runs on its thread."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from handoffmon.counts import Counts
from handoffmon.depth import DepthBuckets
from handoffmon.refit.periodic import PeriodicRefit
from handoffmon.refit.result import RefitResult
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
    """A failing snapshot or publisher is counted with its error; the caller sees None."""

    def broken() -> Counts:
        raise RuntimeError("store down")

    def bad_publish(_: RefitResult) -> None:
        raise ValueError("gauge error")

    job = PeriodicRefit(broken, lambda r: None, 60, buckets=DepthBuckets())
    assert job.run_once() is None
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


def test_for_monitor_refits_the_monitor_and_fills_the_prometheus_refit_gauges() -> None:
    """Inside a running monitor: its aggregates are refit with its config and every refit
    gauge exporter is updated (here a real PrometheusExporter on a fresh registry)."""
    from prometheus_client import CollectorRegistry

    from handoffmon.config import HandoffmonConfig
    from handoffmon.exporters.prometheus import PrometheusExporter
    from handoffmon.pipeline.monitor import Monitor
    from tests.sources.replica import synthetic_turns

    registry = CollectorRegistry()
    config = HandoffmonConfig.model_validate({"refit": {"min_n": 10, "interval_s": 30}})
    with Monitor(config, exporters=[PrometheusExporter(registry)], start=False) as monitor:
        for turn in synthetic_turns(7, 2000):
            monitor.aggregates.add_turn(turn)
        job = PeriodicRefit.for_monitor(monitor, clock=lambda: 50.0)
        assert job.interval_s == 30
        result = job.run_once()
        assert result is not None and job.stats.failures == 0 and result.min_n == 10
        fit = result.rules["all"]
        assert registry.get_sample_value(
            "handoffmon_prefix_influence", {"model": "m1", "rule": "all"}
        ) == pytest.approx(fit.models["m1"].prefix_influence)
        assert registry.get_sample_value("handoffmon_refit_last_success_timestamp_seconds") == 50.0


def test_publisher_returning_false_counts_as_failure() -> None:
    """publish_refit-style False is a failed refit in the stats (and not a crash)."""
    counts = _counts()
    job = PeriodicRefit(lambda: counts, lambda r: False, 60, buckets=DepthBuckets())
    assert job.run_once() is None and job.stats.failures == 1


def test_failed_refit_is_counted_as_monitor_error_stage_refit() -> None:
    """A refit that raises is exported as `handoffmon_monitor_errors_total{stage="refit"}`
    (RefitFailing and the dashboard read it) and never raises into the caller."""
    from prometheus_client import CollectorRegistry, generate_latest

    from handoffmon.config import HandoffmonConfig
    from handoffmon.exporters.prometheus import PrometheusExporter
    from handoffmon.pipeline.monitor import Monitor
    from handoffmon.refit.periodic import PeriodicRefit

    registry = CollectorRegistry()
    with Monitor(HandoffmonConfig(), exporters=[PrometheusExporter(registry)], start=False) as monitor:
        periodic = PeriodicRefit.for_monitor(monitor, interval_s=60)
        periodic._snapshot = lambda: (_ for _ in ()).throw(RuntimeError("store gone"))  # type: ignore[method-assign]
        assert periodic.run_once() is None
        assert periodic.run_once() is None
        monitor.flush()
        text = generate_latest(registry).decode()
    assert 'handoffmon_monitor_errors_total{stage="refit"} 2.0' in text
    assert periodic.stats.failures == 2
