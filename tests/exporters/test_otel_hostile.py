"""Names a client or an upstream chose (hostile model names) stay bounded on OTel spans and events."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from handoffmon.exporters.otel import MAX_ID_CHARS, OTelExporter
from handoffmon.labels import MAX_LABEL_CHARS, LabelGuard
from tests.exporters.turns import export_turn, make_result

HUGE = 100_000
"""Characters in each hostile name (a model string a client may send through a wildcard route)."""


def _exporter(
    span: Literal["join", "own"], max_models: int = 5
) -> tuple[OTelExporter, InMemorySpanExporter, InMemoryLogRecordExporter]:
    spans, logs = InMemorySpanExporter(), InMemoryLogRecordExporter()
    tp, lp = TracerProvider(), LoggerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    lp.add_log_record_processor(SimpleLogRecordProcessor(logs))
    guard = LabelGuard(max_models=max_models)
    exporter = OTelExporter(tracer_provider=tp, logger_provider=lp, guard=guard, span=span)
    return exporter, spans, logs


def _hostile(i: int) -> Any:
    name = f"m{i}-" + "x" * HUGE
    return make_result(
        conversation_id=f"c{i}",
        author=name,
        requested_model=name,
        provider=name,
        response_id=f"r{i}-" + "y" * HUGE,
        # a rule name handoffmon did not validate (an invalid rule a caller declared in Python)
        checks=[("json", "pass"), (f"rule{i}-" + "z" * HUGE, "error")],
    )


def _longest(attributes: Any) -> int:
    values = list(attributes.values())
    texts = [v for v in values if isinstance(v, str)]
    texts += [x for v in values if isinstance(v, tuple) for x in v if isinstance(x, str)]
    return max(len(t) for t in texts)


def test_own_span_names_stay_few_and_attributes_short_whatever_models_clients_send() -> None:
    """40 distinct 100 kB requested models: span names take the requested_model label cap (5)
    and the rest are plain ``chat``; no attribute is longer than a label (ids: 256)."""
    exporter, spans, logs = _exporter("own", max_models=5)
    for i in range(40):
        assert export_turn(exporter, _hostile(i))
    finished = spans.get_finished_spans()
    assert len(finished) == 40
    names = {s.name for s in finished}
    assert len(names) == 6 and "chat" in names  # 5 admitted models + the plain operation name
    assert max(len(n) for n in names) == len("chat ") + MAX_LABEL_CHARS
    first = finished[0].attributes
    assert first["gen_ai.request.model"] == ("m0-" + "x" * HUGE)[:MAX_LABEL_CHARS]
    assert first["handoffmon.author"] == first["gen_ai.request.model"]
    assert first["gen_ai.response.id"] == ("r0-" + "y" * HUGE)[:MAX_ID_CHARS]
    assert max(_longest(s.attributes) for s in finished) == MAX_ID_CHARS
    records = [r.log_record for r in logs.get_finished_logs()]
    assert len(records) == 2 * 40 and max(_longest(r.attributes) for r in records) == MAX_ID_CHARS  # 2 rules


@pytest.mark.parametrize("span", ["join", "own"])
def test_join_events_carry_names_no_longer_than_a_label(span: Literal["join", "own"]) -> None:
    """The ``handoffmon.turn`` and evaluation events (join) cut names like the own span does,
    the evaluation's rule name too."""
    exporter, _spans, logs = _exporter(span)
    assert export_turn(exporter, _hostile(1))
    records = [r.log_record for r in logs.get_finished_logs()]
    assert records and all(_longest(r.attributes) <= MAX_ID_CHARS for r in records)
    model_attrs = [r.attributes[k] for r in records for k in ("handoffmon.author",) if k in r.attributes]
    assert model_attrs and all(len(v) == MAX_LABEL_CHARS for v in model_attrs)


def test_a_client_sent_role_cannot_outgrow_the_content_budget() -> None:
    """Roles are whatever the client sent: a 1 MB role on the newest message kept the captured
    input over 1 MB although its text was cut to nothing; roles are cut like names."""
    import json

    from handoffmon.exporters.otel import MAX_CONTENT_BYTES, content_attributes
    from handoffmon.types import Message, TurnContent

    history = (Message("user", "hello"), Message("r" * 1_000_000, "text"))
    attrs = content_attributes(TurnContent(history, "ok"), "stop")
    assert len(attrs["gen_ai.input.messages"].encode()) <= MAX_CONTENT_BYTES
    (newest,) = json.loads(attrs["gen_ai.input.messages"])[-1:]
    assert newest == {"role": "r" * MAX_LABEL_CHARS, "parts": [{"type": "text", "content": "text"}]}


@pytest.mark.parametrize("span", ["join", "own"])
def test_lone_surrogates_in_names_and_ids_reach_otlp_as_escapes(
    span: Literal["join", "own"], caplog: pytest.LogCaptureFixture
) -> None:
    """A caller id or model name holding a lone surrogate (a client's JSON "\\ud800"): the OTLP
    encoder could not encode it as UTF-8, logged a traceback and dropped the attribute, for
    every span and event of such a turn. It arrives spelled as its escape, as labels are."""
    import logging

    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    exporter, spans, logs = _exporter(span)
    turn = make_result(
        conversation_id="c\ud800", author="gpt\ud800", requested_model="g\udc80", checks=[("json", "pass")]
    )
    with caplog.at_level(logging.ERROR):
        assert export_turn(exporter, turn)
        encode_spans(spans.get_finished_spans()).SerializeToString()
        encode_logs(logs.get_finished_logs()).SerializeToString()
    assert not [r for r in caplog.records if "Failed to encode" in r.getMessage()]
    records = [r.log_record.attributes for r in logs.get_finished_logs()]
    finished = [s.attributes for s in spans.get_finished_spans()]
    for attrs in [*records, *finished]:
        assert attrs["gen_ai.conversation.id"] == "c\\ud800" and attrs["handoffmon.author"] == "gpt\\ud800"


def test_a_deep_turns_attributions_are_counts_by_method_not_a_list_per_message() -> None:
    """Turn 2,000 of a conversation: its earlier messages' attribution methods were one list
    element each on every turn's span or event (2,000 strings re-sent per turn, O(depth²) per
    conversation); they are counts by method, at most one attribute per known method."""
    from handoffmon.exporters.otel import span_attributes
    from handoffmon.types import ATTRIBUTION_METHODS

    methods = ["chain"] * 1500 + ["content"] * 400 + ["response_id"] * 99 + ["bogus"]
    attrs = span_attributes(make_result(depth=2000, methods=methods))
    counts = {k: v for k, v in attrs.items() if k.startswith("handoffmon.attribution")}
    assert counts == {
        "handoffmon.attributions.chain": 1500,
        "handoffmon.attributions.content": 400,
        "handoffmon.attributions.response_id": 99,
        "handoffmon.attributions.unknown": 1,
    }
    assert len(counts) <= len(ATTRIBUTION_METHODS)
    assert all(not isinstance(v, (list, tuple)) or len(v) <= MAX_LABEL_CHARS for v in attrs.values())
