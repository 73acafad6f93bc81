"""A turn whose OTel events or span cannot be emitted is still counted in the OTel metrics,
as Prometheus counts it: the signals fail apart, and the failure is one export error."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from handoffmon.exporters import build_exporters
from handoffmon.exporters.otel import OTelExporter
from tests.exporters.turns import make_result, prometheus_total
from tests.pipeline.helpers import make_config, monitor, run_conversation

SAMPLED = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class BrokenProcessor:
    """A span and log-record processor of the application that raises on every record."""

    def on_emit(self, record: Any) -> None:
        raise RuntimeError("processor bug")

    emit = on_emit

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        raise RuntimeError("processor bug")

    def on_end(self, span: Any) -> None:
        raise RuntimeError("processor bug")

    def _on_ending(self, span: Any) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _providers() -> tuple[TracerProvider, LoggerProvider, MeterProvider, InMemoryMetricReader]:
    tp, lp, reader = TracerProvider(), LoggerProvider(), InMemoryMetricReader()
    tp.add_span_processor(BrokenProcessor())  # type: ignore[arg-type]
    lp.add_log_record_processor(BrokenProcessor())  # type: ignore[arg-type]
    return tp, lp, MeterProvider(metric_readers=[reader]), reader


def _points(reader: InMemoryMetricReader, name: str) -> dict[tuple[tuple[str, Any], ...], float]:
    data = reader.get_metrics_data()
    return {
        tuple(sorted((p.attributes or {}).items())): p.value
        for rm in (data.resource_metrics if data else ())
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == name
        for p in m.data.data_points
    }


@pytest.mark.parametrize("span", ["join", "own"])
def test_a_failing_event_pipeline_still_counts_the_turn(span: str) -> None:
    """The events' exporter reports the failure (False); the counting one took the turn and its checks."""
    tp, lp, mp, reader = _providers()
    exp = OTelExporter(tracer_provider=tp, logger_provider=lp, meter_provider=mp, span=span)  # type: ignore[arg-type]
    result = make_result(checks=[("json", "pass"), ("lang", "fail")], metadata={"traceparent": SAMPLED})
    assert exp.events.export(result) is False
    assert exp.export(result) is True
    assert sum(_points(reader, "handoffmon_turns").values()) == 1
    checks = {dict(k)["verdict"]: v for k, v in _points(reader, "handoffmon_checks").items() if v}
    assert checks == {"pass": 1, "fail": 1}


@pytest.mark.parametrize("span", ["join", "own"])
def test_through_the_monitor_otel_and_prometheus_agree_and_count_the_failure(span: str) -> None:
    """Same traffic, broken event pipeline: OTel's turns equal Prometheus', and each turn
    whose events failed is one monitor_errors{stage="export"} in both."""
    config = make_config(
        telemetry={"otel": True, "otel_span": span, "prometheus": True, "log_turns": False},
        refit={"interval_s": 0},
    )
    tp, lp, mp, reader = _providers()
    registry = CollectorRegistry()
    exporters = build_exporters(
        config, registry=registry, tracer_provider=tp, logger_provider=lp, meter_provider=mp
    )
    m = monitor(config, exporters=exporters)
    run_conversation(m, ["a", "b", "a"], metadata=[{"traceparent": SAMPLED}] * 3)
    assert m.flush(10)
    prom_turns = prometheus_total(registry, "handoffmon_turns")
    assert prom_turns == 3
    assert sum(_points(reader, "handoffmon_turns").values()) == prom_turns
    assert registry.get_sample_value("handoffmon_monitor_errors_total", {"stage": "export"}) == 3
    assert _points(reader, "handoffmon_monitor_errors")[(("stage", "export"),)] == 3
    m.close(5)
