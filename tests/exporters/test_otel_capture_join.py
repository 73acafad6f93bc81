"""``telemetry.capture_content`` with ``otel_span: join`` exports no text, and says so once."""

from __future__ import annotations

import logging

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

from handoffmon.exporters.otel import OTelExporter
from handoffmon.labels import LabelGuard
from handoffmon.types import Message, TurnContent
from tests.exporters.turns import export_turn, make_result


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "handoffmon.exporters" and r.levelno == logging.WARNING
    ]


def test_join_mode_warns_that_capture_content_has_no_effect(caplog: pytest.LogCaptureFixture) -> None:
    events = InMemoryLogRecordExporter()
    lp = LoggerProvider()
    lp.add_log_record_processor(SimpleLogRecordProcessor(events))
    with caplog.at_level(logging.WARNING, logger="handoffmon.exporters"):
        exporter = OTelExporter(logger_provider=lp, guard=LabelGuard(), capture_content=True)
    (warning,) = _warnings(caplog)
    assert "capture_content_ignored" in warning and "join" in warning
    content = TurnContent((Message("user", "secret question"),), "secret answer")
    assert export_turn(exporter, make_result(content=content, checks=[("json", "pass")]))
    records = events.get_finished_logs()
    assert len(records) == 2  # the turn event and one evaluation
    assert not any("secret" in str(r.log_record.attributes) for r in records)


@pytest.mark.parametrize(("capture", "span"), [(True, "own"), (False, "join"), (False, "own")])
def test_no_warning_when_the_setting_means_what_it_says(
    caplog: pytest.LogCaptureFixture, capture: bool, span: str
) -> None:
    with caplog.at_level(logging.WARNING, logger="handoffmon.exporters"):
        OTelExporter(guard=LabelGuard(), capture_content=capture, span=span)  # type: ignore[arg-type]
    assert _warnings(caplog) == []
