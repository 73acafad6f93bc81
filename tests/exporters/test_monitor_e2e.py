"""End to end through the Monitor: scripted conversations → exact /metrics; canaries never leak."""

from __future__ import annotations

import io
import logging
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from handoffmon.config import HandoffmonConfig
from handoffmon.exporters import build_exporters, prometheus_exporter
from handoffmon.exporters.logs import StructlogExporter
from handoffmon.exporters.serving import start_metrics_server
from handoffmon.ingress import Outcome, RequestParser
from handoffmon.pipeline.monitor import Monitor
from tests.exporters.turns import L, chk, counted, only, parse_exposition, tr

RULES = [{"name": "json", "check": "valid_json"}, {"name": "nocomma", "check": "no_commas"}]


class Telemetry:
    """Every exporter wired to in-memory sinks."""

    def __init__(self, config: HandoffmonConfig) -> None:
        self.spans = InMemorySpanExporter()
        tp = TracerProvider()
        tp.add_span_processor(SimpleSpanProcessor(self.spans))
        self.events = InMemoryLogRecordExporter()
        lp = LoggerProvider()
        lp.add_log_record_processor(SimpleLogRecordProcessor(self.events))
        self.reader = InMemoryMetricReader()
        self.log = io.StringIO()
        self.exporters = build_exporters(
            config,
            registry=CollectorRegistry(),
            tracer_provider=tp,
            meter_provider=MeterProvider(metric_readers=[self.reader]),
            logger_provider=lp,
        )
        self.exporters[-1] = StructlogExporter(fmt=config.telemetry.log_format, stream=self.log)
        self.prometheus = prometheus_exporter(self.exporters)


@pytest.fixture
def config() -> HandoffmonConfig:
    return HandoffmonConfig(rules=RULES, telemetry={"otel": True, "otel_span": "own", "exemplars": True})


@pytest.fixture
def telemetry(config: HandoffmonConfig) -> Telemetry:
    return Telemetry(config)


@pytest.fixture
def monitor(config: HandoffmonConfig, telemetry: Telemetry) -> Iterator[Monitor]:
    m = Monitor(config, exporters=telemetry.exporters)
    yield m
    m.close()


def turn(m: Monitor, conv: str, history: list[dict[str, Any]], reply: str, author: str, **kw: Any) -> list:
    """One request through the monitor; returns the history including the reply."""
    request = RequestParser.from_config(m.config).parse(
        history, "chat-group", headers={"x-conversation-id": conv}
    )
    m.finish(
        m.capture(request), {"role": "assistant", "content": reply}, Outcome((author,), **kw), latency_s=0.2
    )
    return [*history, {"role": "assistant", "content": reply}]


def run_script(m: Monitor, canary: str = "", conv_tag: str = "") -> None:
    """A: gpt, gpt, then claude after a fallback. B: claude, then an edited reply → prefix unknown."""
    sys_msg = {"role": "system", "content": f"You are terse. {canary}SYS"}
    a = [sys_msg, {"role": "user", "content": f"q1 {canary}P1"}]
    a = turn(m, f"A{conv_tag}", a, '{"a": 1}' + (f" {canary}R1" if canary else ""), "gpt")
    a = turn(
        m,
        f"A{conv_tag}",
        [*a, {"role": "user", "content": f"q2 {canary}P2"}],
        f"no json, sorry {canary}R2",
        "gpt",
    )
    turn(m, f"A{conv_tag}", [*a, {"role": "user", "content": "q3"}], '{"b": 2}', "claude", fallbacks=1)
    b = turn(
        m,
        f"B{conv_tag}",
        [sys_msg, {"role": "user", "content": f"hi {canary}P3"}],
        '{"x": 1, "y": 2}',
        "claude",
    )
    b[-1] = {"role": "assistant", "content": "edited by the client"}
    turn(m, f"B{conv_tag}", [*b, {"role": "user", "content": "more"}], f"plain {canary}R3", "gpt")
    assert m.flush(timeout_s=10)


def test_scripted_conversation_through_monitor_gives_exact_series(
    monitor: Monitor, telemetry: Telemetry
) -> None:
    """The Monitor's real attribution and checkers produce exactly the expected counters on /metrics."""
    run_script(monitor)
    with start_metrics_server(telemetry.prometheus.registry, 0) as server:
        s = parse_exposition(urllib.request.urlopen(server.url, timeout=5).read().decode())
    assert only(s, "handoffmon_turns_total") == {
        L(model="gpt", prefix_model="none", depth_bucket="1"): 1,
        L(model="gpt", prefix_model="gpt", depth_bucket="2"): 1,
        L(model="claude", prefix_model="gpt", depth_bucket="3-4"): 1,
        L(model="claude", prefix_model="none", depth_bucket="1"): 1,
        L(model="gpt", prefix_model="unknown", depth_bucket="2"): 1,
    }

    assert counted(s, "handoffmon_checks_total") == {
        chk("json", "gpt", "none", "1", "pass"): 1,
        chk("nocomma", "gpt", "none", "1", "pass"): 1,
        chk("json", "gpt", "gpt", "2", "fail"): 1,
        chk("nocomma", "gpt", "gpt", "2", "fail"): 1,
        chk("json", "claude", "gpt", "3-4", "pass"): 1,
        chk("nocomma", "claude", "gpt", "3-4", "pass"): 1,
        chk("json", "claude", "none", "1", "pass"): 1,
        chk("nocomma", "claude", "none", "1", "fail"): 1,
        chk("json", "gpt", "unknown", "2", "fail"): 1,
        chk("nocomma", "gpt", "unknown", "2", "pass"): 1,
    }

    assert only(s, "handoffmon_rule_transitions_total") == {
        tr("json", "gpt", "false", "pass", "fail"): 1,
        tr("nocomma", "gpt", "false", "pass", "fail"): 1,
        tr("json", "claude", "true", "fail", "pass"): 1,
        tr("nocomma", "claude", "true", "fail", "pass"): 1,
        tr("json", "gpt", "unknown", "pass", "fail"): 1,
        tr("nocomma", "gpt", "unknown", "fail", "pass"): 1,
    }
    assert only(s, "handoffmon_attributions_total") == {
        L(method="chain"): 3,
        L(method="content"): 0,  # initialised: known methods start at 0
        L(method="response_id"): 0,
        L(method="unknown"): 1,
    }
    assert only(s, "handoffmon_fallbacks_total") == {L(requested_model="chat-group", model="claude"): 1}
    # the pipeline pushed its stage overheads (MonitorObserver): one observation per turn and stage
    assert only(s, "handoffmon_overhead_seconds_count")[L(stage="background")] == 5
    assert len(telemetry.spans.get_finished_spans()) == 5
    assert len(telemetry.log.getvalue().splitlines()) == 5


def test_canaries_in_prompts_and_replies_never_leave_the_process(
    monitor: Monitor, telemetry: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    """Canary text in system/user prompts and replies is absent from /metrics (both formats), every
    span (attributes, events, resource) and every log line — per-turn events and handoffmon's own logs."""
    canary = f"CANARY{uuid.uuid4().hex[:12]}"
    conv_tag = f"-conv{uuid.uuid4().hex[:8]}"  # ids are allowed out: proves each surface is really scanned
    with caplog.at_level(logging.DEBUG):
        run_script(monitor, canary, conv_tag)
        monitor.close()
    registry = telemetry.prometheus.registry
    spans = telemetry.spans.get_finished_spans()
    assert len(spans) == 5
    surfaces = {
        "metrics": generate_latest(registry).decode(),
        "openmetrics": generate_openmetrics(registry).decode(),
        "spans": "\n".join(span.to_json() for span in spans),
        "otel events": "\n".join(r.to_json() for r in telemetry.events.get_finished_logs()),
        "otel metrics": telemetry.reader.get_metrics_data().to_json(),
        "turn logs": telemetry.log.getvalue(),
        "captured logs": "\n".join(f"{r.name} {r.getMessage()} {r.exc_text or ''}" for r in caplog.records),
    }
    assert all(conv_tag in surfaces[name] for name in ("openmetrics", "spans", "otel events", "turn logs"))
    leaks = {name for name, text in surfaces.items() if canary in text}
    assert leaks == set()
