"""ExporterDispatch counts every turn an exporter did not take, including those left at close."""

from __future__ import annotations

import logging

import pytest

from handoffmon.pipeline.dispatch import ExporterDispatch
from handoffmon.testing import RecordingExporter, make_turn_result
from tests.pipeline.helpers import HangingExporter


def test_backlog_abandoned_at_close_counts_one_error_per_turn() -> None:
    """A hung exporter with one turn in progress and four queued: close(timeout) gives up and
    counts five export errors (one per turn never exported), not one."""
    errors: list[str] = []
    exp = HangingExporter()
    d = ExporterDispatch(exp, queue_size=10, on_error=lambda s, n=1: errors.extend([s] * n))
    try:
        for i in range(5):
            d.submit(make_turn_result(conversation_id=f"c{i}"))
        assert exp.entered.wait(5)
        d.close(0.2)
        assert errors == ["export"] * 5
    finally:
        exp.release.set()


class _Unflushed(RecordingExporter):
    def force_flush(self, timeout_s: float = 5.0) -> bool:
        return False


def test_a_flush_that_fails_at_close_counts_one_error() -> None:
    """An exporter whose force_flush reports failure (e.g. a span processor that timed out) counts."""
    errors: list[str] = []
    exp = _Unflushed()
    d = ExporterDispatch(exp, queue_size=10, on_error=lambda s, n=1: errors.extend([s] * n))
    d.submit(make_turn_result())
    d.close(2)
    assert len(exp.results) == 1 and exp.shut
    assert errors == ["export"]


class _FlushRaises(RecordingExporter):
    def force_flush(self, timeout_s: float = 5.0) -> bool:
        raise OSError("collector refused the connection")


@pytest.mark.parametrize(
    ("exporter", "said"),
    [
        (_FlushRaises, "_FlushRaises: force_flush raised OSError('collector refused the connection')"),
        (_Unflushed, "_Unflushed: force_flush returned False (timed out or failed)"),
    ],
)
def test_a_flush_that_raises_at_close_is_logged_with_its_exception_and_still_shuts_down(
    exporter: type[RecordingExporter], said: str, caplog: pytest.LogCaptureFixture
) -> None:
    """force_flush raising is one export error, logged with what it raised (not as a flush that
    ran out of time), and the exporter is still shut down; a False flush is logged as such."""
    errors: list[str] = []
    exp = exporter()
    d = ExporterDispatch(exp, queue_size=10, on_error=lambda s, n=1: errors.extend([s] * n))
    d.submit(make_turn_result())
    with caplog.at_level(logging.WARNING, logger="handoffmon.pipeline"):
        d.close(2)
    assert [r.getMessage() for r in caplog.records] == [f"handoffmon exporter {said}"]
    assert len(exp.results) == 1 and exp.shut
    assert errors == ["export"]
