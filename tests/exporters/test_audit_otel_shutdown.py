"""runtime.close() delivers what the application's batching OTel pipeline still holds: spans,
events and a metric export, although every schedule is a minute or more away."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, InMemoryLogRecordExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.pipeline.helpers import make_config, run_conversation, runtime


class MemoryMetrics(MetricExporter):
    """Keeps every exported batch."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[Any] = []

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        self.batches.append(metrics_data)
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


@pytest.mark.parametrize(("span", "spans_expected", "events_expected"), [("join", 0, 6), ("own", 3, 3)])
def test_close_flushes_batched_spans_events_and_metrics(
    span: str, spans_expected: int, events_expected: int
) -> None:
    spans, events, metrics = InMemorySpanExporter(), InMemoryLogRecordExporter(), MemoryMetrics()
    tp, lp = TracerProvider(), LoggerProvider()
    tp.add_span_processor(BatchSpanProcessor(spans, schedule_delay_millis=60_000))
    lp.add_log_record_processor(BatchLogRecordProcessor(events, schedule_delay_millis=60_000))
    mp = MeterProvider(
        metric_readers=[PeriodicExportingMetricReader(metrics, export_interval_millis=600_000)]
    )
    config = make_config(
        telemetry={"otel": True, "otel_span": span, "prometheus": False, "log_turns": False},
        refit={"interval_s": 0},
    )
    rt = runtime(config, tracer_provider=tp, logger_provider=lp, meter_provider=mp)
    run_conversation(rt.monitor, ["a", "b", "a"])  # one rule: three evaluation events
    assert spans.get_finished_spans() == () and metrics.batches == []
    rt.close()
    assert len(spans.get_finished_spans()) == spans_expected
    assert len(events.get_finished_logs()) == events_expected
    turns = [
        p.value
        for data in metrics.batches
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "handoffmon_turns"
        for p in m.data.data_points
    ]
    assert sum(turns) == 3
    tp.shutdown()
    lp.shutdown()
    mp.shutdown()
