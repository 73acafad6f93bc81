"""OTel counting does not wait on span delivery: an application's synchronous span processor
(``SimpleSpanProcessor``) exporting to a collector that does not answer holds only the thread
that emits the spans and events, never the counting, and every turn whose span is lost is one
``monitor_errors{stage="export"}`` in both Prometheus and OTel."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider, TraceBasedExemplarFilter
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from prometheus_client import CollectorRegistry

from handoffmon.exporters import build_exporters
from tests.exporters.otlp_endpoint import stalled_otlp_endpoint
from tests.exporters.turns import prometheus_total
from tests.pipeline.helpers import make_config, monitor, run_conversation

TURNS = 40
QUEUE = 4


@pytest.fixture
def stalled_endpoint() -> Iterator[str]:
    with stalled_otlp_endpoint(30.0) as url:
        yield url


def _otel_sum(reader: InMemoryMetricReader, name: str, **attrs: str) -> float:
    data = reader.get_metrics_data()
    return sum(
        p.value
        for rm in (data.resource_metrics if data else ())
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == name
        for p in m.data.data_points
        if all((p.attributes or {}).get(k) == v for k, v in attrs.items())
    )


def _wait(predicate: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


@pytest.mark.parametrize("span", ["own", "join"])
def test_a_stalled_synchronous_span_exporter_does_not_hold_the_counting(
    stalled_endpoint: str, span: str
) -> None:
    """40 turns while every span export (own span: SimpleSpanProcessor → OTLP/HTTP) or event
    export (join: SimpleLogRecordProcessor → OTLP/HTTP) hangs, 10 s timeout: all 40 are in
    OTel's handoffmon_turns, as in Prometheus', within seconds; the turns whose span or events
    could not be handed on are monitor_errors{stage="export"}, equal in both."""
    tp = TracerProvider(shutdown_on_exit=False)
    tp.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{stalled_endpoint}/v1/traces", timeout=10))
    )
    lp = LoggerProvider(shutdown_on_exit=False)
    lp.add_log_record_processor(
        SimpleLogRecordProcessor(OTLPLogExporter(endpoint=f"{stalled_endpoint}/v1/logs", timeout=10))
    )
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    config = make_config(
        telemetry={"otel": True, "otel_span": span, "prometheus": True, "log_turns": False},
        pipeline={"export_queue_size": QUEUE},
        refit={"interval_s": 0},
    )
    registry = CollectorRegistry()
    sampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    m = monitor(
        config,
        exporters=build_exporters(
            config, registry=registry, tracer_provider=tp, meter_provider=mp, logger_provider=lp
        ),
    )
    try:
        t0 = time.monotonic()
        for i in range(TURNS // 2):
            run_conversation(m, ["a", "b"], metadata=[{"traceparent": sampled}] * 2, user=f"u{i}")

        assert _wait(lambda: _otel_sum(reader, "handoffmon_turns") == TURNS, 8.0), _otel_sum(
            reader, "handoffmon_turns"
        )
        took = time.monotonic() - t0
        assert took < 8.0, took
        prom_turns = prometheus_total(registry, "handoffmon_turns")
        assert prom_turns == TURNS
        prom_errors = registry.get_sample_value("handoffmon_monitor_errors_total", {"stage": "export"})
        otel_errors = _otel_sum(reader, "handoffmon_monitor_errors", stage="export")
        # the span thread holds 1 turn, the queue QUEUE more: the rest are refused, each counted
        assert prom_errors is not None and prom_errors >= TURNS - QUEUE - 2, prom_errors
        assert otel_errors == prom_errors
    finally:
        m.close(2)
        for provider in (tp, lp, mp):  # their exporters stop retrying the stalled endpoint
            threading.Thread(target=provider.shutdown, daemon=True).start()


class _ThreadOfEachTurnCount(TraceBasedExemplarFilter):
    """The SDK's default exemplar filter, noting the thread of each ``handoffmon_turns`` add
    (the SDK consults it synchronously on the thread that records the measurement)."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    def should_sample(self, value: Any, time_unix_nano: int, attributes: Any, context: Any) -> bool:
        if attributes is not None and set(attributes) == {"model", "prefix_model", "depth_bucket"} and value:
            self.threads.append(threading.current_thread().name)
        return super().should_sample(value, time_unix_nano, attributes, context)


def test_turns_are_counted_on_a_handoffmon_thread_not_the_callers() -> None:
    """The counting is off the request path: every handoffmon_turns add happens on one of the
    monitor's threads, none on the thread that called capture/finish."""
    seen = _ThreadOfEachTurnCount()
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader], exemplar_filter=seen, shutdown_on_exit=False)
    config = make_config(
        telemetry={"otel": True, "prometheus": False, "log_turns": False}, refit={"interval_s": 0}
    )
    m = monitor(config, exporters=build_exporters(config, meter_provider=mp))
    try:
        run_conversation(m, ["a", "b", "a"])
        assert m.flush(10)
    finally:
        m.close(2)
    assert len(seen.threads) == 3, seen.threads
    caller = threading.current_thread().name
    assert all(name != caller and name.startswith("handoffmon") for name in seen.threads), seen.threads
