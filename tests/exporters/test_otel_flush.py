"""OTelExporter.force_flush against a real (slow) OTLP/HTTP endpoint: one deadline for all providers."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from handoffmon.exporters.otel import OTelExporter
from tests.exporters.otlp_endpoint import stalled_otlp_endpoint
from tests.exporters.turns import make_result

STALL_S = 3.0


@pytest.fixture
def slow_endpoint() -> Iterator[str]:
    """An OTLP endpoint that takes STALL_S to answer each export."""
    with stalled_otlp_endpoint(STALL_S) as url:
        yield url


def _otlp_providers(endpoint: str) -> tuple[TracerProvider, LoggerProvider, MeterProvider]:
    """Trace, log and metric providers exporting over OTLP/HTTP to ``endpoint`` in the background."""
    tp, lp = TracerProvider(shutdown_on_exit=False), LoggerProvider(shutdown_on_exit=False)
    tp.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces", timeout=10)))
    lp.add_log_record_processor(
        BatchLogRecordProcessor(OTLPLogExporter(endpoint=f"{endpoint}/v1/logs", timeout=10))
    )
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=f"{endpoint}/v1/metrics", timeout=10), export_interval_millis=60_000
    )
    return tp, lp, MeterProvider(metric_readers=[reader], shutdown_on_exit=False)


def test_force_flush_shares_one_deadline_across_providers(slow_endpoint: str) -> None:
    """Traces, events and metrics all stall at the collector: force_flush(1.0) returns False in
    about 1 s, not 1 s per provider."""
    tp, lp, mp = _otlp_providers(slow_endpoint)
    exp = OTelExporter(tracer_provider=tp, meter_provider=mp, logger_provider=lp, span="own")
    try:
        assert exp.export(make_result(checks=[("json", "pass")]))
        t0 = time.monotonic()
        ok = exp.force_flush(1.0)
        took = time.monotonic() - t0
        assert ok is False
        assert took < 1.8, took
    finally:
        for provider in (tp, lp, mp):
            threading.Thread(target=provider.shutdown, daemon=True).start()


def test_monitor_close_stays_within_its_timeout(slow_endpoint: str) -> None:
    """A runtime exporting to a stalled OTLP endpoint closes within its budget (plus slack),
    and the unfinished flush is counted as an export error."""
    from handoffmon.exporters import build_exporters
    from tests.pipeline.helpers import make_config, monitor, run_conversation

    tp, lp, mp = _otlp_providers(slow_endpoint)
    config = make_config(
        telemetry={"otel": True, "otel_span": "own", "prometheus": False, "log_turns": False}
    )
    exporters = build_exporters(config, tracer_provider=tp, meter_provider=mp, logger_provider=lp)
    m = monitor(config, exporters=exporters)
    try:
        run_conversation(m, ["a", "b"])
        assert m.flush(10)
        t0 = time.monotonic()
        m.close(1.0)
        took = time.monotonic() - t0
        assert took < 1.8, took
        assert m.snapshot().monitor_errors.get("export") == 1
    finally:
        for provider in (tp, lp, mp):
            threading.Thread(target=provider.shutdown, daemon=True).start()
