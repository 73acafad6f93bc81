"""Evaluation events follow trace sampling: none for a trace the sampler dropped."""

from __future__ import annotations

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased

from handoffmon.exporters.otel import OTelExporter
from tests.exporters.turns import export_turn, make_result

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SAMPLED = f"00-{TRACE}-00f067aa0ba902b7-01"
NOT_SAMPLED = f"00-{TRACE}-00f067aa0ba902b7-00"


def _run(span: str, traceparent: str | None, sampler: object = None) -> tuple[int, int, float]:
    """(events, spans, turns counted) for one turn with two checks."""
    logs, spans, reader = InMemoryLogRecordExporter(), InMemorySpanExporter(), InMemoryMetricReader()
    lp = LoggerProvider()
    lp.add_log_record_processor(SimpleLogRecordProcessor(logs))
    tp = TracerProvider(sampler=sampler or ParentBased(ALWAYS_ON))
    tp.add_span_processor(SimpleSpanProcessor(spans))
    exp = OTelExporter(
        tracer_provider=tp,
        logger_provider=lp,
        meter_provider=MeterProvider(metric_readers=[reader]),
        span=span,
    )
    meta = {"traceparent": traceparent} if traceparent else None
    assert export_turn(exp, make_result(checks=[("json", "pass"), ("lang", "fail")], metadata=meta))
    data = reader.get_metrics_data()
    turns = sum(
        p.value
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "handoffmon_turns"
        for p in m.data.data_points
    )
    return len(logs.get_finished_logs()), len(spans.get_finished_spans()), turns


@pytest.mark.parametrize("span", ["join", "own"])
def test_unsampled_parent_gets_no_events_but_the_turn_is_counted(span: str) -> None:
    """A caller trace flagged not sampled: no evaluation (or turn) event, no span; metrics count."""
    events, spans, turns = _run(span, NOT_SAMPLED)
    assert (events, spans, turns) == (0, 0, 1)


@pytest.mark.parametrize("span", ["join", "own"])
def test_sampled_parent_and_no_parent_keep_their_events(span: str) -> None:
    """A sampled caller trace, or none captured (joined by gen_ai.response.id), keeps the events."""
    own = 1 if span == "own" else 0
    per_turn = 2 + (1 - own)  # two evaluations, plus the turn event when joining
    assert _run(span, SAMPLED) == (per_turn, own, 1)
    assert _run(span, None) == (per_turn, own, 1)


def test_own_span_dropped_by_the_sampler_takes_its_events_along() -> None:
    """No caller trace, but the application's sampler drops handoffmon's own span: no events."""
    assert _run("own", None, sampler=ALWAYS_OFF) == (0, 0, 1)
