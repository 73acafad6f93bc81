"""handoffmon joins the trace of an application already traced by LiteLLM's OpenTelemetry callback.

A real ``litellm.Router`` with LiteLLM's own OTel callback (it writes the GenAI span of the
call, ``litellm_request``, after the call returns) is wrapped by handoffmon with
``telemetry.otel`` in the default ``join`` mode: handoffmon adds no second span, and its
evaluation and turn events carry the ``gen_ai.response.id`` LiteLLM's span carries — how
the semantic conventions join an evaluation to its GenAI span when the span id is not
available to the evaluator. (With a caller span open at the request, the events are also
parented to it: ``test_otel.py`` and ``tests/ingress/test_request.py``.)
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from handoffmon.integrations import wrap
from tests.pipeline.helpers import make_config, runtime

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@pytest.fixture
def litellm_otel() -> Iterator[InMemorySpanExporter]:
    """LiteLLM's OpenTelemetry callback exporting to memory (restored afterwards: it is global)."""
    import litellm
    from litellm.integrations.opentelemetry import OpenTelemetry, OpenTelemetryConfig

    # Every litellm.Router registers bound-method callbacks in litellm's global lists and the
    # callback manager refuses new ones once a list holds MAX_CALLBACKS (30): after ~30 Routers in
    # this process (how many depends on which test files ran here first) LiteLLM's OTel callback
    # would be dropped with a warning. Start from empty lists and put the others back afterwards.
    saved = {name: list(getattr(litellm, name)) for name in _CALLBACK_LISTS}
    for name in _CALLBACK_LISTS:
        getattr(litellm, name).clear()
    spans = InMemorySpanExporter()
    otel = OpenTelemetry(config=OpenTelemetryConfig(exporter=spans, skip_set_global=True))
    litellm.callbacks = [*litellm.callbacks, otel]
    try:
        yield spans
    finally:
        # litellm copies callbacks into its success/failure lists on the first call: remove it from
        # every list, or every later litellm call in this process keeps recording spans into memory
        litellm.logging_callback_manager.remove_callback_from_all_lists(otel)
        assert otel not in litellm.logging_callback_manager.get_all_callbacks()
        for name, callbacks in saved.items():
            getattr(litellm, name)[:] = callbacks


_CALLBACK_LISTS = (
    "callbacks",
    "input_callback",
    "success_callback",
    "failure_callback",
    "_async_input_callback",
    "_async_success_callback",
    "_async_failure_callback",
)


def _wait(cond: Any, timeout_s: float = 15.0, describe: Any = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"condition not reached: {describe() if describe else ''}"
        time.sleep(0.05)


def _litellm_state(spans: InMemorySpanExporter) -> str:
    """What LiteLLM wrote and holds, for a failure message (this wait failed once in CI, not since)."""
    import litellm

    finished = [(s.name, sorted(s.attributes or {})) for s in spans.get_finished_spans()]
    lists = {name: [type(c).__name__ for c in getattr(litellm, name)] for name in _CALLBACK_LISTS}
    return f"finished spans {finished}; litellm callback lists {lists}"


def test_evaluations_join_the_span_litellm_already_writes(litellm_otel: InMemorySpanExporter) -> None:
    """No second `chat` span; the turn and evaluation events carry the gen_ai.response.id of LiteLLM's
    GenAI span for the same call."""
    from litellm import Router

    router = Router(
        model_list=[
            {
                "model_name": "g",
                "litellm_params": {"model": "openai/gpt-x", "api_key": "k", "mock_response": "short answer"},
                "model_info": {"id": "dep-x"},
            }
        ]
    )
    own_spans, events = InMemorySpanExporter(), InMemoryLogRecordExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(own_spans))
    lp = LoggerProvider()
    lp.add_log_record_processor(SimpleLogRecordProcessor(events))
    config = make_config(telemetry={"otel": True, "prometheus": False, "log_turns": False})
    with runtime(config, tracer_provider=tp, logger_provider=lp) as rt:
        wrapped = wrap(router, runtime=rt)
        reply = wrapped.completion(model="g", messages=[{"role": "user", "content": "hi"}])
        assert rt.flush(10)
    _wait(
        lambda: any(s.attributes.get("gen_ai.response.id") for s in litellm_otel.get_finished_spans()),
        describe=lambda: _litellm_state(litellm_otel),
    )
    (llm,) = (s for s in litellm_otel.get_finished_spans() if s.attributes.get("gen_ai.response.id"))
    assert llm.name == "litellm_request" and llm.attributes["gen_ai.operation.name"] == "chat"
    assert own_spans.get_finished_spans() == ()  # handoffmon added no span
    records = [r.log_record for r in events.get_finished_logs()]
    assert sorted(r.event_name for r in records) == ["gen_ai.evaluation.result", "handoffmon.turn"]
    for r in records:
        assert r.attributes["gen_ai.response.id"] == llm.attributes["gen_ai.response.id"] == reply.id
    (evaluation,) = (r for r in records if r.event_name == "gen_ai.evaluation.result")
    assert evaluation.attributes["gen_ai.evaluation.name"] == "short"
    assert evaluation.attributes["gen_ai.evaluation.score.label"] == "pass"
