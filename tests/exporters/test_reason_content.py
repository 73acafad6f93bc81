"""Checker reasons leave the process (OTel explanations, the turn log's ``reasons``): a key the
model wrote in its JSON reply must not reach any of them, nor a metric."""

from __future__ import annotations

import io
import json
import logging

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, generate_latest
from pydantic import BaseModel

from handoffmon.exporters import build_exporters
from tests.pipeline.helpers import make_config, monitor, run_conversation

CANARY = "CANARYKEY_ssn_123456789"


class Reply(BaseModel):
    """``scores``' keys are the model's."""

    scores: dict[str, int]


@pytest.mark.parametrize("span", ["own", "join"])
def test_reply_keys_reach_no_event_log_line_or_metric(span: str) -> None:
    """A failing json_schema / pydantic_model verdict on a reply keyed by a canary: the canary is
    in no span, OTel event, OTel metric, Prometheus sample or turn-log line; the reasons are there."""
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    config = make_config(
        rules=[
            {"name": "js", "check": "json_schema", "params": {"schema": schema}},
            {"name": "pm", "check": "pydantic_model", "params": {"model": f"{__name__}:Reply"}},
        ],
        telemetry={"otel": True, "otel_span": span, "prometheus": True, "log_turns": True},
        refit={"interval_s": 0},
    )
    spans, logs, reader = InMemorySpanExporter(), InMemoryLogRecordExporter(), InMemoryMetricReader()
    tp, lp = TracerProvider(), LoggerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    lp.add_log_record_processor(SimpleLogRecordProcessor(logs))
    registry, buf = CollectorRegistry(), io.StringIO()
    turn_log = logging.getLogger(f"test.reason_content.{span}")
    turn_log.setLevel(logging.INFO)
    turn_log.propagate = False
    turn_log.addHandler(logging.StreamHandler(buf))
    exporters = build_exporters(
        config,
        registry=registry,
        tracer_provider=tp,
        meter_provider=MeterProvider(metric_readers=[reader]),
        logger_provider=lp,
        logger=turn_log,
    )
    reply = json.dumps({CANARY: "x", "scores": {CANARY: "y"}})
    with monitor(config, exporters=exporters) as m:
        run_conversation(m, ["a"], [reply])
        assert m.flush(10)
    events = [dict(r.log_record.attributes or {}) for r in logs.get_finished_logs()]
    explanations = {
        e["gen_ai.evaluation.name"]: e.get("gen_ai.evaluation.explanation")
        for e in events
        if "gen_ai.evaluation.name" in e
    }
    assert explanations == {
        "js": "schema:type@additionalProperties/type",
        "pm": "model:int_parsing@*/*",
    }
    line = json.loads(buf.getvalue().splitlines()[0])
    assert line["reasons"] == explanations
    blob = "\n".join(
        [
            json.dumps(events, default=str),
            json.dumps([dict(s.attributes or {}) for s in spans.get_finished_spans()], default=str),
            buf.getvalue(),
            reader.get_metrics_data().to_json(),
            generate_latest(registry).decode(),
        ]
    )
    assert CANARY not in blob
