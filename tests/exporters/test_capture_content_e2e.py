"""telemetry.capture_content through the Monitor: text reaches spans only when opted in."""

from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from handoffmon.exporters import build_exporters
from tests.pipeline.helpers import make_config, monitor, run_conversation


@pytest.mark.parametrize("capture", [True, False])
def test_capture_content_puts_messages_on_spans_only_when_enabled(capture: bool) -> None:
    """With the opt-in the turn span carries the GenAI input/output messages; without it, none."""
    spans = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    config = make_config(
        telemetry={
            "capture_content": capture,
            "otel": True,
            "otel_span": "own",
            "prometheus": False,
            "log_turns": False,
        },
        refit={"interval_s": 0},
    )
    with monitor(config, exporters=build_exporters(config, tracer_provider=tp)) as m:
        run_conversation(m, ["a", "b"], ["first answer", "second answer"], user="hello")
        assert m.flush(10)
    finished = spans.get_finished_spans()
    assert len(finished) == 2
    attrs = dict(finished[-1].attributes or {})
    if not capture:
        assert "gen_ai.input.messages" not in attrs
        assert "gen_ai.output.messages" not in attrs
        # nor any of the text under another name, on either span or its events
        blob = json.dumps(
            [
                (s.name, dict(s.attributes or {}), [dict(e.attributes or {}) for e in s.events])
                for s in finished
            ],
            default=str,
        )
        for text in ("hello", "first answer", "next 0", "second answer"):
            assert text not in blob, text
        return
    blob_in = json.dumps(json.loads(str(attrs["gen_ai.input.messages"])))
    blob_out = json.dumps(json.loads(str(attrs["gen_ai.output.messages"])))
    assert "first answer" in blob_in and "next 0" in blob_in
    assert "second answer" in blob_out
