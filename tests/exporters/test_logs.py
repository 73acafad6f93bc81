"""Structured logs: one event per turn (JSON or console), own errors with context, no global config."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest
import structlog
from structlog.testing import CapturingLogger

from handoffmon.exporters.logs import TURN_EVENT, StructlogExporter, get_logger, log_error, make_logger
from handoffmon.labels import exportable
from tests.exporters.turns import make_result


def handed_off_turn():  # type: ignore[no-untyped-def]
    return make_result(
        conversation_id="c-77",
        depth=3,
        author="claude",
        prefix_model="gpt",
        fallbacks=1,
        latency_s=0.25,
        checks=[("json", "pass"), ("lang", "fail")],
        reasons={"lang": "expected de"},
        methods=["chain", "content"],
    )


def test_json_event_per_turn_has_ids_models_verdicts_timings() -> None:
    """One JSON line per turn with the documented fields and values."""
    out = io.StringIO()
    exp = StructlogExporter(fmt="json", stream=out)
    assert exp.export(handed_off_turn())
    (line,) = out.getvalue().splitlines()
    event = json.loads(line)
    assert event["event"] == TURN_EVENT and event["level"] == "info"
    expected = {
        "conversation_id": "c-77",
        "depth": 3,
        "depth_bucket": "3-4",
        "model": "claude",
        "authors": ["claude"],
        "prefix_model": "gpt",
        "handoff": True,
        "fallbacks": 1,
        "latency_ms": 250.0,
        "check_ms": 2.0,
        "verdicts": {"json": "pass", "lang": "fail"},
        "failed": ["lang"],
        "reasons": {"lang": "expected de"},
        "attributions": {"chain": 1, "content": 1},
        "requested_model": "gpt-group",
        "history_tokens": 100,
    }
    assert {k: event[k] for k in expected} == expected
    assert event["timestamp"].endswith("Z")


def test_console_format_renders_key_values() -> None:
    """telemetry.log_format=console renders a readable key=value line without colors."""
    out = io.StringIO()
    StructlogExporter(fmt="console", stream=out).export(handed_off_turn())
    text = out.getvalue()
    assert TURN_EVENT in text and "depth=3" in text and "prefix_model=gpt" in text
    assert "\x1b[" not in text


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_hostile_model_names_are_cut_and_cannot_forge_lines(fmt: str) -> None:
    """Model and deployment names come from clients and upstreams: 100 kB names with a newline,
    an ANSI escape and a bidi override give one line per turn, each name cut to a label's 128
    characters (the line was 300 kB), and no raw control character."""
    name = "gpt\n2026-01-01T00:00:00Z [error] forged\x1b[2J\u202e" + "x" * 100_000
    out = io.StringIO()
    turn = make_result(author=name, prefix_model=name, requested_model=name)
    assert StructlogExporter(fmt=fmt, stream=out).export(turn)  # type: ignore[arg-type]
    (line,) = out.getvalue().splitlines()
    assert len(line) < 3_000
    assert not any(c in line for c in "\x1b\u202e\r")
    if fmt == "json":
        event = json.loads(line)
        label = exportable(name[:128])  # as the label value: controls spelled as escapes
        assert label.startswith("gpt\\x0a2026") and "\\x1b[2J\\u202e" in label
        assert event["model"] == event["prefix_model"] == event["requested_model"] == label
        assert event["authors"] == [label] and event["deployment_id"] == label


def test_default_goes_to_stdlib_logger_and_respects_its_level(caplog: pytest.LogCaptureFixture) -> None:
    """Without a logger, events go to stdlib `handoffmon.turns`; a disabled level skips them entirely."""
    exp = StructlogExporter()
    with caplog.at_level(logging.INFO, logger="handoffmon.turns"):
        assert exp.export(handed_off_turn())
    (rec,) = [r for r in caplog.records if r.name == "handoffmon.turns"]
    assert json.loads(rec.getMessage())["conversation_id"] == "c-77"
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="handoffmon.turns"):
        assert exp.export(handed_off_turn())
    assert [r for r in caplog.records if r.name == "handoffmon.turns"] == []


def test_application_structlog_logger_is_used_as_is() -> None:
    """An application's own structlog logger receives the event with its fields, unrendered."""
    cap = CapturingLogger()
    app_logger = structlog.wrap_logger(
        cap, processors=[], wrapper_class=structlog.BoundLogger, context_class=dict
    )
    assert StructlogExporter(app_logger).export(handed_off_turn())
    (call,) = cap.calls
    assert call.method_name == "info"
    assert call.kwargs["event"] == TURN_EVENT and call.kwargs["depth"] == 3


def test_structlog_global_configuration_is_untouched() -> None:
    """Building loggers and exporters leaves structlog's global config exactly as it was."""
    before = structlog.get_config()
    StructlogExporter(fmt="console", stream=io.StringIO()).export(handed_off_turn())
    get_logger("handoffmon.test").info("x")
    assert structlog.get_config() == before


def test_log_error_carries_stage_error_type_and_context(caplog: pytest.LogCaptureFixture) -> None:
    """handoffmon's own errors: stage, error type, short message and the caller's ids in one JSON line."""
    log = get_logger("handoffmon.stores", backend="redis")
    with caplog.at_level(logging.ERROR, logger="handoffmon.stores"):
        log_error(log, "store_failed", "attribution", TimeoutError("read timed out"), conversation_id="c1")
    (rec,) = caplog.records
    event = json.loads(rec.getMessage())
    assert event == {
        "backend": "redis",
        "stage": "attribution",
        "error_type": "TimeoutError",
        "error": "read timed out",
        "conversation_id": "c1",
        "event": "store_failed",
        "level": "error",
        "timestamp": event["timestamp"],
    }
    assert rec.levelno == logging.ERROR


def test_exception_rendering_never_shows_local_variables() -> None:
    """Tracebacks are rendered without locals in both formats, so content in a frame cannot leak."""
    for fmt in ("json", "console"):
        out = io.StringIO()
        log = make_logger(fmt=fmt, stream=out)  # type: ignore[arg-type]
        try:
            secret_reply = "CANARY-LOCAL-7f3a"  # noqa: F841 - must not appear in the rendering
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
        assert "ValueError: boom" in out.getvalue()
        assert "CANARY-LOCAL-7f3a" not in out.getvalue()


def test_export_never_raises() -> None:
    """A malformed result returns False."""
    assert StructlogExporter(stream=io.StringIO()).export(object()) is False  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_a_lone_surrogate_in_an_id_or_name_does_not_lose_the_line(fmt: str, tmp_path: Path) -> None:
    """A caller conversation id with a lone surrogate (ids are decoded with surrogatepass): the
    console renderer passed it through raw and a UTF-8 file handler failed on it ('--- Logging
    error ---'), so the turn's line was lost. Ids and names are spelled as their escapes."""
    path = tmp_path / "turns.log"
    handler = logging.FileHandler(path, encoding="utf-8")
    logger = logging.getLogger(f"test.logs.surrogate.{fmt}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(handler)
    raised = []
    handler.handleError = lambda record: raised.append(record)  # type: ignore[method-assign]
    try:
        assert StructlogExporter(logger, fmt=fmt).export(
            make_result(conversation_id="c\udc80", author="gpt\ud800")
        )  # type: ignore[arg-type]
    finally:
        handler.close()
        logger.removeHandler(handler)
    assert raised == []
    (line,) = path.read_text(encoding="utf-8").splitlines()
    assert "udc80" in line and "ud800" in line
