"""In ``otel_span: own`` mode a turn's counts carry exemplars of its own span, though the span is
started later on the events thread: the counting plans the span (ids from the application's id
generator, the decision of its sampler, asked once) and the events thread starts it with them.
"""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import RandomIdGenerator, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, TraceIdRatioBased

from handoffmon._version import __version__
from handoffmon.exporters.otel import OTelExporter
from tests.pipeline.helpers import make_config, monitor, run_conversation

CALLER_TRACE = 0x4BF92F3577B34DA6A3CE929D0E0E4736
SAMPLED = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
EXEMPLAR_METRICS = ("handoffmon_turns", "handoffmon_checks", "handoffmon_history_tokens")


class _CountingSampler(ParentBased):
    """ParentBased(TraceIdRatioBased(ratio)) that counts how often it is asked."""

    def __init__(self, ratio: float) -> None:
        super().__init__(TraceIdRatioBased(ratio))
        self.calls = 0

    def should_sample(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return super().should_sample(*args, **kwargs)


class _Setup:
    def __init__(self, sampler: Any = None) -> None:
        self.spans = InMemorySpanExporter()
        self.tp = TracerProvider(sampler=sampler, shutdown_on_exit=False)
        self.tp.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.otel = OTelExporter(
            tracer_provider=self.tp,
            meter_provider=MeterProvider(metric_readers=[self.reader], shutdown_on_exit=False),
            span="own",
        )
        self.config = make_config(
            telemetry={"otel": True, "otel_span": "own", "prometheus": False, "log_turns": False},
            rules=[{"name": "json", "check": "valid_json"}],
            refit={"interval_s": 0},
        )

    def run(self, conversations: int, metadata: Any = None) -> None:
        with monitor(self.config, exporters=[self.otel]) as m:
            for i in range(conversations):
                run_conversation(m, ["a", "b"], ["{}", "no"], metadata=metadata, user=f"u{i}")
            assert m.flush(10)
            # before close: its flush collects, and a collection hands the exemplars out once
            self.data = self.reader.get_metrics_data()

    def exemplars(self) -> dict[str, set[tuple[int, int]]]:
        out: dict[str, set[tuple[int, int]]] = {}
        for rm in self.data.resource_metrics if self.data else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    for point in metric.data.data_points:
                        for e in point.exemplars:
                            out.setdefault(metric.name, set()).add((e.trace_id, e.span_id))
        return out

    def span_ids(self) -> set[tuple[int, int]]:
        return {(s.context.trace_id, s.context.span_id) for s in self.spans.get_finished_spans()}


def test_a_turn_without_traceparent_has_exemplars_of_its_own_span() -> None:
    setup = _Setup()
    setup.run(3)
    spans = setup.span_ids()
    assert len(spans) == 6
    exemplars = setup.exemplars()
    for name in EXEMPLAR_METRICS:
        assert exemplars.get(name), (name, exemplars)
        assert exemplars[name] <= spans, name  # each points at a span that was exported


def test_with_a_traceparent_the_exemplar_is_the_own_span_in_the_callers_trace() -> None:
    setup = _Setup()
    setup.run(1, metadata=[{"traceparent": SAMPLED}] * 2)
    spans = setup.span_ids()
    assert {t for t, _ in spans} == {CALLER_TRACE} and len(spans) == 2
    for name in EXEMPLAR_METRICS:
        assert setup.exemplars()[name] <= spans, name


def test_the_applications_sampler_is_asked_once_per_span_and_its_drops_leave_no_exemplar() -> None:
    sampler = _CountingSampler(0.5)
    setup = _Setup(sampler)
    setup.run(40)  # 80 turns: about half the own spans sampled
    spans = setup.span_ids()
    assert sampler.calls == 80
    assert 20 <= len(spans) <= 60, len(spans)
    for name in EXEMPLAR_METRICS:
        assert setup.exemplars()[name] <= spans, name

    dropped = _Setup(ALWAYS_OFF)
    dropped.run(3)
    assert dropped.span_ids() == set()
    assert dropped.exemplars() == {}


def test_two_exporters_on_one_provider_both_plan_their_spans() -> None:
    """The SDK hands both the same tracer of handoffmon's scope, wrapped once."""
    setup = _Setup()
    setup.run(1)
    first = setup.otel
    setup.reader = InMemoryMetricReader()
    setup.otel = OTelExporter(
        tracer_provider=setup.tp,
        meter_provider=MeterProvider(metric_readers=[setup.reader], shutdown_on_exit=False),
        span="own",
    )
    setup.run(2)
    assert first.events._own.enabled and setup.otel.events._own.enabled
    assert len(setup.span_ids()) == 6
    for name in EXEMPLAR_METRICS:
        assert setup.exemplars()[name] <= setup.span_ids(), name


def test_an_sdk_that_ignores_the_preset_ids_turns_planning_off(caplog: pytest.LogCaptureFixture) -> None:
    """Should a later SDK stop taking ids from the tracer's id_generator, the first own span
    whose ids differ from its plan turns planning off: counts fall back to the traceparent."""
    setup = _Setup()
    setup.run(1)
    tracer = setup.tp.get_tracer("handoffmon", __version__)
    tracer.id_generator = RandomIdGenerator()  # as if the SDK no longer used our wrapper
    setup.run(1)
    assert setup.otel.events._own.enabled is False
    assert any("own_span_ids_not_preset" in r.getMessage() for r in caplog.records)
    assert setup.otel.events.count_context(_result_without_parent()) is None


def _result_without_parent() -> Any:
    from tests.exporters.turns import make_result

    return make_result(checks=[("json", "pass")])


def test_a_plan_left_behind_holds_no_reference_to_its_turn() -> None:
    """A turn the events' full queue refused leaves its plan behind (bounded): the plan must not
    keep the turn, and the message text it may carry, alive."""
    import gc

    from handoffmon.exporters.otel import _Plan

    setup = _Setup()
    result = _result_without_parent()
    assert setup.otel.export(result)  # counted; its span never started
    plans = setup.otel.events._own._plans
    assert len(plans) == 1
    assert not [r for r in gc.get_referrers(result) if isinstance(r, _Plan) or r is plans]
