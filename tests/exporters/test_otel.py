"""OTelExporter: own GenAI span or joining the caller's trace, evaluation events as log records, counters."""

from __future__ import annotations

import gzip
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from handoffmon.counts import ShadowKey
from handoffmon.exporters.otel import OTelExporter
from handoffmon.labels import LabelGuard
from handoffmon.protocols import Exporter, MonitorObserver, ShadowPairObserver
from tests.exporters.refits import make_refit
from tests.exporters.turns import FINISHED_AT, export_turn, make_result, sample_content, scripted_conversation


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture
def logs() -> InMemoryLogRecordExporter:
    return InMemoryLogRecordExporter()


def _providers(
    spans: InMemorySpanExporter, logs: InMemoryLogRecordExporter, reader: InMemoryMetricReader | None = None
) -> dict[str, Any]:
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    lp = LoggerProvider()
    lp.add_log_record_processor(SimpleLogRecordProcessor(logs))
    readers = [reader] if reader is not None else []
    return {
        "tracer_provider": tp,
        "meter_provider": MeterProvider(metric_readers=readers),
        "logger_provider": lp,
    }


@pytest.fixture
def exporter(
    spans: InMemorySpanExporter, logs: InMemoryLogRecordExporter, reader: InMemoryMetricReader
) -> OTelExporter:
    """An exporter emitting its own span per turn (span="own")."""
    return OTelExporter(**_providers(spans, logs, reader), span="own")


def events(logs: InMemoryLogRecordExporter, name: str) -> list[Any]:
    """The log records of one event name."""
    return [r.log_record for r in logs.get_finished_logs() if r.log_record.event_name == name]


def points(reader: InMemoryMetricReader, name: str) -> dict[tuple[tuple[str, Any], ...], Any]:
    """Data points of one instrument keyed by sorted attributes."""
    out = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == name:
                    for p in m.data.data_points:
                        out[tuple(sorted(p.attributes.items()))] = p
    return out


def test_implements_exporter_and_observer(exporter: OTelExporter) -> None:
    """The pipeline recognizes the OTel exporter as Exporter and MonitorObserver."""
    assert isinstance(exporter, Exporter) and isinstance(exporter, MonitorObserver)


def test_turn_span_follows_genai_conventions(exporter: OTelExporter, spans: InMemorySpanExporter) -> None:
    """One CLIENT span `chat {request model}` with gen_ai.* and handoffmon.* attributes, dated by the turn."""
    result = make_result(
        conversation_id="c9",
        depth=3,
        author="claude",
        prefix_model="gpt",
        fallbacks=1,
        latency_s=1.25,
        provider="bedrock",
        checks=[("json", "pass")],
        methods=["chain", "content"],
        history_tokens=800,
    )
    assert export_turn(exporter, result)
    (span,) = spans.get_finished_spans()
    assert span.name == "chat gpt-group"
    assert span.kind is SpanKind.CLIENT
    assert span.end_time == int(FINISHED_AT * 1e9)
    assert span.end_time - span.start_time == pytest.approx(1.25e9, abs=1e3)
    assert dict(span.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "aws.bedrock",
        "gen_ai.request.model": "gpt-group",
        "gen_ai.response.model": "claude-2024",
        "gen_ai.conversation.id": "c9",
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 30,
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.request.stream": False,
        "handoffmon.conversation_id_source": "caller",
        "handoffmon.depth": 3,
        "handoffmon.depth_bucket": "3-4",
        "handoffmon.author": "claude",
        "handoffmon.authors": ("claude",),
        "handoffmon.prefix_model": "gpt",
        "handoffmon.prefix_purity": 1.0,
        "handoffmon.prefix_authors": 1,
        "handoffmon.handoff": "true",
        "handoffmon.history_chars": 3200,
        "handoffmon.history_tokens": 800,
        "handoffmon.reply_chars": 42,
        "handoffmon.fallbacks": 1,
        "handoffmon.retries": 0,
        "handoffmon.attributions.chain": 1,
        "handoffmon.attributions.content": 1,
        "handoffmon.deployment_id": "claude-dep",
    }


def test_each_verdict_is_a_genai_evaluation_event(
    exporter: OTelExporter, spans: InMemorySpanExporter, logs: InMemoryLogRecordExporter
) -> None:
    """gen_ai.evaluation.result log records parented to the turn span: name, label, 1/0 score for
    pass/fail only, error.type on errors, gen_ai.response.id, and the turn's handoff context."""
    result = make_result(
        depth=2,
        prefix_model="gpt-4o",
        checks=[("json", "pass"), ("lang", "fail"), ("len", "not_applicable"), ("re", "error")],
        transitions=[("lang", "pass", "fail")],
        reasons={"lang": "expected de, got en", "re": "over_budget"},
        response_id="chatcmpl-77",
    )
    export_turn(exporter, result)
    (span,) = spans.get_finished_spans()
    assert span.events == ()  # span events are being deprecated: none
    records = events(logs, "gen_ai.evaluation.result")
    assert len(records) == 4
    assert all((r.trace_id, r.span_id) == (span.context.trace_id, span.context.span_id) for r in records)
    assert all(r.timestamp == span.end_time for r in records)
    by_rule = {r.attributes["gen_ai.evaluation.name"]: dict(r.attributes) for r in records}
    base = {
        "handoffmon.evaluation.duration_s": 0.001,
        "gen_ai.response.id": "chatcmpl-77",
        "gen_ai.conversation.id": result.context.conversation_id,
        "handoffmon.depth": 2,
        "handoffmon.author": result.record.author,
        "handoffmon.prefix_model": "gpt-4o",
        "handoffmon.handoff": "false",  # gpt-4o after gpt-4o
    }
    assert by_rule["json"] == {
        **base,
        "gen_ai.evaluation.name": "json",
        "gen_ai.evaluation.score.label": "pass",
        "gen_ai.evaluation.score.value": 1.0,
    }
    assert by_rule["lang"] == {
        **base,
        "gen_ai.evaluation.name": "lang",
        "gen_ai.evaluation.score.label": "fail",
        "gen_ai.evaluation.score.value": 0.0,
        "gen_ai.evaluation.explanation": "expected de, got en",
        "handoffmon.evaluation.previous_label": "pass",
    }
    assert by_rule["len"] == {
        **base,
        "gen_ai.evaluation.name": "len",
        "gen_ai.evaluation.score.label": "not_applicable",
    }
    assert by_rule["re"] == {
        **base,
        "gen_ai.evaluation.name": "re",
        "gen_ai.evaluation.score.label": "error",
        "gen_ai.evaluation.explanation": "over_budget",
        "error.type": "over_budget",
    }


def test_join_mode_adds_no_span_and_parents_events_to_the_callers_span(
    spans: InMemorySpanExporter, logs: InMemoryLogRecordExporter
) -> None:
    """span="join": no span of handoffmon's; a handoffmon.turn event with the turn's attributes and the
    evaluation events, all in the caller's trace under the caller's span (from the traceparent)."""
    exp = OTelExporter(**_providers(spans, logs))
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    result = make_result(metadata={"traceparent": tp}, checks=[("json", "fail")], response_id="chatcmpl-5")
    assert export_turn(exp, result)
    assert spans.get_finished_spans() == ()
    (turn,) = events(logs, "handoffmon.turn")
    (evaluation,) = events(logs, "gen_ai.evaluation.result")
    for record in (turn, evaluation):
        assert (record.trace_id, record.span_id) == (0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7)
    assert turn.attributes["handoffmon.depth"] == result.context.depth
    assert turn.attributes["gen_ai.response.id"] == "chatcmpl-5"
    assert turn.attributes["handoffmon.prefix_model"] == result.context.prefix_model
    assert evaluation.attributes["gen_ai.response.id"] == "chatcmpl-5"
    assert evaluation.attributes["gen_ai.evaluation.score.label"] == "fail"


def test_join_mode_without_a_parent_still_correlates_by_response_id(
    spans: InMemorySpanExporter, logs: InMemoryLogRecordExporter
) -> None:
    """No trace context captured: the events carry no trace, only gen_ai.response.id to join on."""
    exp = OTelExporter(**_providers(spans, logs))
    export_turn(exp, make_result(checks=[("json", "pass")], response_id="chatcmpl-6"))
    (evaluation,) = events(logs, "gen_ai.evaluation.result")
    assert evaluation.trace_id == 0 and evaluation.attributes["gen_ai.response.id"] == "chatcmpl-6"
    assert spans.get_finished_spans() == ()


def test_counters_mirror_prometheus_names_and_labels(
    exporter: OTelExporter, reader: InMemoryMetricReader
) -> None:
    """handoffmon_turns/checks/rule_transitions/attributions carry the Prometheus labels and values."""
    for r in scripted_conversation():
        export_turn(exporter, r)
    turns = points(reader, "handoffmon_turns")
    assert {k: p.value for k, p in turns.items()} == {
        (("depth_bucket", "1"), ("model", "gpt"), ("prefix_model", "none")): 2,
        (("depth_bucket", "2"), ("model", "gpt"), ("prefix_model", "gpt")): 1,
        (("depth_bucket", "3-4"), ("model", "claude"), ("prefix_model", "gpt")): 1,
        (("depth_bucket", "3-4"), ("model", "claude"), ("prefix_model", "claude")): 1,
        (("depth_bucket", "1"), ("model", "claude"), ("prefix_model", "none")): 1,
        (("depth_bucket", "2"), ("model", "llama"), ("prefix_model", "unknown")): 1,
    }
    checks = points(reader, "handoffmon_checks")
    assert sum(p.value for p in checks.values()) == 12 and sum(1 for p in checks.values() if p.value) == 11
    cells = {tuple(kv for kv in k if kv[0] != "verdict") for k in checks}
    assert len(checks) == 4 * len(cells) == 40  # every verdict of a cell, from its first check on
    key = (
        ("depth_bucket", "3-4"),
        ("model", "claude"),
        ("prefix_model", "claude"),
        ("rule", "lang"),
        ("verdict", "error"),
    )
    assert checks[key].value == 1
    trans = points(reader, "handoffmon_rule_transitions")
    key = (
        ("from_verdict", "pass"),
        ("handoff", "true"),
        ("model", "claude"),
        ("rule", "json"),
        ("to_verdict", "fail"),
    )
    assert trans[key].value == 1
    assert {k: p.value for k, p in points(reader, "handoffmon_attributions").items()} == {
        (("method", "chain"),): 5,
        (("method", "content"),): 1,
        (("method", "response_id"),): 0,  # every method from the start, as in Prometheus
        (("method", "unknown"),): 1,
    }


def test_health_api_and_refit_gauges(exporter: OTelExporter, reader: InMemoryMetricReader) -> None:
    """Overhead histogram, error/drop counters and refit observable gauges reach the MeterProvider."""
    exporter.observe_overhead("check", 0.004)
    exporter.count_error("store")
    exporter.count_drop(3)
    exporter.publish_refit(make_refit())
    hist = points(reader, "handoffmon_overhead_seconds")[(("stage", "check"),)]
    assert hist.count == 1 and hist.sum == pytest.approx(0.004)
    assert points(reader, "handoffmon_monitor_errors")[(("stage", "store"),)].value == 1
    assert points(reader, "handoffmon_queue_dropped")[()].value == 3
    infl = points(reader, "handoffmon_prefix_influence")
    assert infl[(("fit", "local"), ("model", "gpt"), ("rule", "json"))].value == -0.06
    delta = points(reader, "handoffmon_handoff_delta")
    assert delta[
        (("bound", "upper"), ("fit", "local"), ("model", "claude"), ("prefix_model", "gpt"), ("rule", "all"))
    ].value == (pytest.approx(-0.07))


def test_shadow_pair_increments_mirror_the_prometheus_counter(
    exporter: OTelExporter, reader: InMemoryMetricReader
) -> None:
    """A shadow pair's increments reach ``handoffmon_shadow_pair_stats`` with the Prometheus labels;
    the exporter is the pipeline's ShadowPairObserver."""
    assert isinstance(exporter, ShadowPairObserver)
    exporter.count_shadow(
        {ShadowKey("json", "gpt", "claude", "prefix_only"): 1, ShadowKey("all", "gpt", "claude", "n2"): 3}
    )
    exporter.count_shadow({ShadowKey("json", "gpt", "claude", "prefix_only"): 1})
    got = {k: p.value for k, p in points(reader, "handoffmon_shadow_pair_stats").items()}
    pair = (("model", "claude"), ("prefix_model", "gpt"))
    assert got == {
        (*pair, ("rule", "json"), ("stat", "prefix_only")): 2,
        (*pair, ("rule", "all"), ("stat", "n2")): 3,
    }


def test_traceparent_in_metadata_parents_the_span(
    exporter: OTelExporter, spans: InMemorySpanExporter
) -> None:
    """A W3C traceparent carried in the turn metadata links the background span to the request trace."""
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    export_turn(exporter, make_result(metadata={"traceparent": tp}))
    (span,) = spans.get_finished_spans()
    assert span.context.trace_id == 0x4BF92F3577B34DA6A3CE929D0E0E4736
    assert span.parent is not None and span.parent.span_id == 0x00F067AA0BA902B7


def test_content_only_with_opt_in(spans: InMemorySpanExporter) -> None:
    """No message text on spans without capture_content, even if the result has it; with it, it is there."""
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    content = sample_content("what is 2+2?", "4")
    off_exporter = OTelExporter(tracer_provider=tp, meter_provider=MeterProvider(), span="own")
    on_exporter = OTelExporter(
        tracer_provider=tp, meter_provider=MeterProvider(), capture_content=True, span="own"
    )
    assert export_turn(off_exporter, make_result(content=content))
    assert export_turn(on_exporter, make_result(content=content))
    off, on = spans.get_finished_spans()
    assert "gen_ai.input.messages" not in off.attributes and "gen_ai.output.messages" not in off.attributes
    assert json.loads(on.attributes["gen_ai.input.messages"])[1] == {
        "role": "user",
        "parts": [{"type": "text", "content": "what is 2+2?"}],
    }
    assert json.loads(on.attributes["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "4"}], "finish_reason": "stop"}
    ]


def test_never_installs_global_providers() -> None:
    """Building and using the exporter leaves the OTel API's global providers as they were."""
    before_t, before_m = trace.get_tracer_provider(), metrics.get_meter_provider()
    exp = OTelExporter()  # falls back to the (proxy) global providers
    assert export_turn(exp, make_result(checks=[("json", "pass")]))
    exp2 = OTelExporter(tracer_provider=TracerProvider(), meter_provider=MeterProvider(), span="own")
    assert export_turn(exp2, make_result())
    assert trace.get_tracer_provider() is before_t
    assert metrics.get_meter_provider() is before_m
    assert type(before_t).__name__ == "ProxyTracerProvider"


def test_export_never_raises(exporter: OTelExporter) -> None:
    """A malformed result returns False."""
    assert exporter.export(None) is False  # type: ignore[arg-type]


# -- OTLP/HTTP ------------------------------------------------------------------------------


class _Receiver(http.server.BaseHTTPRequestHandler):
    bodies: dict[str, list[bytes]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        self.bodies.setdefault(self.path, []).append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def otlp_receiver() -> Iterator[tuple[str, dict[str, list[bytes]]]]:
    bodies: dict[str, list[bytes]] = {}
    handler = type("Handler", (_Receiver,), {"bodies": bodies})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", bodies
    server.shutdown()
    server.server_close()


def test_otlp_http_export_decodes_as_genai_span_and_counters(otlp_receiver: tuple[str, dict]) -> None:
    """Real OTLP/HTTP exporters post protobuf that decodes to our span, the evaluation event as a log
    record under that span (event_name set), and the handoffmon_turns sum."""
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    url, bodies = otlp_receiver
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{url}/v1/traces", timeout=5)))
    metric_reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=f"{url}/v1/metrics", timeout=5), export_interval_millis=3_600_000
    )
    mp = MeterProvider(metric_readers=[metric_reader])
    lp = LoggerProvider()
    lp.add_log_record_processor(
        SimpleLogRecordProcessor(OTLPLogExporter(endpoint=f"{url}/v1/logs", timeout=5))
    )
    exp = OTelExporter(tracer_provider=tp, meter_provider=mp, logger_provider=lp, span="own")
    export_turn(
        exp, make_result(conversation_id="otlp-1", depth=2, prefix_model="gpt-4o", checks=[("json", "fail")])
    )
    export_turn(exp, make_result(conversation_id="otlp-2"))
    assert mp.force_flush(10_000)
    tp.shutdown()
    mp.shutdown()
    lp.shutdown()

    req = ExportTraceServiceRequest()
    span_msgs = []
    for body in bodies["/v1/traces"]:
        req.ParseFromString(body)
        span_msgs += [s for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
    first = next(s for s in span_msgs if any(a.value.string_value == "otlp-1" for a in s.attributes))
    attrs = {a.key: a.value for a in first.attributes}
    assert first.name == "chat gpt-group"
    assert attrs["gen_ai.operation.name"].string_value == "chat"
    assert attrs["handoffmon.depth"].int_value == 2
    assert attrs["handoffmon.handoff"].string_value == "false"
    assert list(first.events) == []
    lreq = ExportLogsServiceRequest()
    records = []
    for body in bodies["/v1/logs"]:
        lreq.ParseFromString(body)
        records += [r for rl in lreq.resource_logs for sl in rl.scope_logs for r in sl.log_records]
    (event,) = records
    ev = {a.key: a.value for a in event.attributes}
    assert event.event_name == "gen_ai.evaluation.result"
    assert (event.trace_id, event.span_id) == (first.trace_id, first.span_id)
    assert ev["gen_ai.evaluation.score.label"].string_value == "fail"
    assert ev["gen_ai.evaluation.score.value"].double_value == 0.0

    mreq = ExportMetricsServiceRequest()
    mreq.ParseFromString(bodies["/v1/metrics"][-1])
    turns = [
        m
        for rm in mreq.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "handoffmon_turns"
    ]
    (turns_metric,) = turns
    assert turns_metric.sum.is_monotonic
    assert sum(p.as_int for p in turns_metric.sum.data_points) == 2


def test_force_flush_drains_the_applications_batch_processor_without_shutting_it_down(
    spans: InMemorySpanExporter,
) -> None:
    """force_flush (called at Monitor close) pushes batched spans out; shutdown leaves the provider usable."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    tp = TracerProvider()
    tp.add_span_processor(BatchSpanProcessor(spans, schedule_delay_millis=3_600_000))
    exp = OTelExporter(tracer_provider=tp, meter_provider=MeterProvider(), span="own")
    export_turn(exp, make_result())
    assert spans.get_finished_spans() == ()
    assert exp.force_flush(5.0)
    assert len(spans.get_finished_spans()) == 1
    exp.shutdown()
    export_turn(exp, make_result())
    assert tp.force_flush(5000) and len(spans.get_finished_spans()) == 2


def test_label_overflows_are_an_observable_counter_like_prometheus(
    spans: InMemorySpanExporter, logs: InMemoryLogRecordExporter, reader: InMemoryMetricReader
) -> None:
    """With a model cap of 2, the scripted conversation's third model (and later unknown names)
    map to ``other``; handoffmon_label_overflows{label} reports the guard's own tally."""
    guard = LabelGuard(max_models=2)
    otel = OTelExporter(**_providers(spans, logs, reader), guard=guard)
    for r in scripted_conversation():
        export_turn(otel, r)
    overflows = {k: p.value for k, p in points(reader, "handoffmon_label_overflows").items()}
    assert overflows[(("label", "model"),)] == guard.overflows()["model"] > 0
    assert set(overflows) == {(("label", label),) for label in guard.overflows()}


def test_store_failures_reach_otel_when_the_runtime_wires_a_failing_store(
    spans: InMemorySpanExporter, logs: InMemoryLogRecordExporter, reader: InMemoryMetricReader
) -> None:
    """OTel-only runtime (Prometheus off) over a store whose every call raises: the turns go
    through (fail open) and handoffmon_store_failures{op, kind} equals the store guard's stats."""
    from handoffmon.config import HandoffmonConfig
    from handoffmon.runtime import build_runtime
    from tests.pipeline.helpers import BrokenStore, run_conversation

    config = HandoffmonConfig.model_validate({"telemetry": {"prometheus": False, "otel": True}})
    store = BrokenStore(fail=["get_many", "put_many", "get_state", "put_state"])
    rt = build_runtime(config, registry=None, store=store, **_providers(spans, logs, reader))
    try:
        run_conversation(rt.monitor, ["a", "b", "b"])
        assert rt.flush(10)
        stats = rt.monitor.store.stats()
        failures = {k: p.value for k, p in points(reader, "handoffmon_store_failures").items()}
    finally:
        rt.close()
    assert sum(stats.values()) >= 3
    expected = {(("kind", k.rpartition("_")[2]), ("op", k.rpartition("_")[0])): n for k, n in stats.items()}
    assert failures == expected
    assert sum(p.value for p in points(reader, "handoffmon_turns").values()) == 3


def test_monitoring_health_series_exist_at_zero_before_any_failure(reader: InMemoryMetricReader) -> None:
    """Before any turn, handoffmon_monitor_errors for every stage and handoffmon_queue_dropped
    are reported at 0, as Prometheus does: through OTLP → Prometheus the first error otherwise
    created its series at 1, which increase() reads as 0, so a first failure never alerted.
    After a count_error the stage's point is 1, the others stay 0."""
    from handoffmon.types import MONITOR_STAGES

    exporter = OTelExporter(meter_provider=MeterProvider(metric_readers=[reader]), guard=LabelGuard())
    errors = {k: p.value for k, p in points(reader, "handoffmon_monitor_errors").items()}
    assert errors == {(("stage", s),): 0 for s in MONITOR_STAGES}
    assert {k: p.value for k, p in points(reader, "handoffmon_queue_dropped").items()} == {(): 0}
    exporter.count_error("check")
    errors = {k: p.value for k, p in points(reader, "handoffmon_monitor_errors").items()}
    assert errors[(("stage", "check"),)] == 1 and sum(errors.values()) == 1


def test_responses_without_reply_start_at_zero_and_count_by_status(reader: InMemoryMetricReader) -> None:
    """handoffmon_responses_without_reply: every status at 0 before any, then one per call of
    ``count_no_reply`` (a status outside the known six, never sent, would read ``other``)."""
    from handoffmon.types import NO_REPLY_STATUSES

    exporter = OTelExporter(meter_provider=MeterProvider(metric_readers=[reader]), guard=LabelGuard())
    got = {k: p.value for k, p in points(reader, "handoffmon_responses_without_reply").items()}
    assert got == {(("status", s),): 0 for s in NO_REPLY_STATUSES}
    exporter.count_no_reply("failed")
    exporter.count_no_reply("failed")
    exporter.count_no_reply("error")
    exporter.count_no_reply("unreadable")
    exporter.count_no_reply("odd")
    got = {k: p.value for k, p in points(reader, "handoffmon_responses_without_reply").items()}
    assert got == {
        (("status", "failed"),): 2,
        (("status", "cancelled"),): 0,
        (("status", "incomplete"),): 0,
        (("status", "refusal"),): 0,
        (("status", "error"),): 1,
        (("status", "unreadable"),): 1,
        (("status", "other"),): 1,
    }


def test_captured_content_is_bounded_keeping_the_newest_messages(spans: InMemorySpanExporter) -> None:
    """A 400-message history of 1 kB messages and a 1 MB reply (opt-in capture): each content
    attribute stays within 64 KiB of JSON (unbounded, the span carried 2.4 MB and 1.4 MB, and an
    OTLP batch over its limit is refused whole): the newest messages are kept, whole and in
    order, the number dropped is said, and the reply's text is its start."""
    from handoffmon.exporters.otel import MAX_CONTENT_BYTES
    from handoffmon.types import Message, TurnContent

    history = tuple(
        Message("user" if i % 2 == 0 else "assistant", f"{i:03d} " + "é" * 996) for i in range(400)
    )
    reply = "ab\n" * 350_000
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    exporter = OTelExporter(
        tracer_provider=tp, meter_provider=MeterProvider(), capture_content=True, span="own"
    )
    assert export_turn(exporter, make_result(content=TurnContent(history, reply)))
    (span,) = spans.get_finished_spans()
    attrs = span.attributes
    inputs, outputs = attrs["gen_ai.input.messages"], attrs["gen_ai.output.messages"]
    assert len(inputs.encode()) <= MAX_CONTENT_BYTES and len(outputs.encode()) <= MAX_CONTENT_BYTES
    kept = json.loads(inputs)
    assert kept == [
        {"role": m.role, "parts": [{"type": "text", "content": m.content}]} for m in history[-len(kept) :]
    ]
    assert len(kept) >= 8 and attrs["handoffmon.input_messages_dropped"] == 400 - len(kept)
    (out,) = json.loads(outputs)
    text = out["parts"][0]["content"]
    assert reply.startswith(text) and len(text) > 10_000 and out["finish_reason"] == "stop"
    assert attrs["handoffmon.content_truncated"] is True
