"""The Monitor runs the periodic refit once an exporter can publish its gauges."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry

from handoffmon.exporters import build_exporters
from tests.pipeline.helpers import make_config, monitor, run_conversation


def _gauge(registry: CollectorRegistry, name: str) -> float | None:
    return registry.get_sample_value(name)


def test_periodic_refit_publishes_gauges_through_prometheus_exporter() -> None:
    """With refit.interval_s > 0 and a Prometheus exporter, the refit timestamp gauge appears."""
    config = make_config(refit={"interval_s": 0.2, "min_n": 1}, telemetry={"log_turns": False})
    registry = CollectorRegistry()
    m = monitor(config, exporters=build_exporters(config, registry=registry))
    try:
        for i in range(6):
            run_conversation(m, ["a", "a", "b", "b"], user=f"user {i}")
        assert m.flush(10)
        assert m.refit is not None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and m.refit.stats.runs == 0:
            time.sleep(0.05)
        assert m.refit.stats.failures == 0, m.refit.stats.last_error
        assert m.refit.stats.last_success_at is not None
        assert (
            _gauge(registry, "handoffmon_refit_last_success_timestamp_seconds")
            == m.refit.stats.last_success_at
        )
    finally:
        m.close()
    assert m.refit._thread is None  # close() stopped it


def test_no_refit_thread_without_a_publisher_or_when_disabled() -> None:
    """No exporter that publishes refits, or interval 0, means no refit thread."""
    m = monitor(make_config(refit={"interval_s": 0.2}))
    assert m.refit is None
    m.close()
    config = make_config(refit={"interval_s": 0}, telemetry={"log_turns": False})
    m2 = monitor(config, exporters=build_exporters(config, registry=CollectorRegistry()))
    assert m2.refit is None
    m2.close()
