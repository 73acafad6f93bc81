"""Monitor error logs are rate limited per kind; every error is still counted."""

from __future__ import annotations

import logging

import pytest

from handoffmon.pipeline.aggregates import Aggregates
from handoffmon.pipeline.errors import MAX_LOG_KINDS, ErrorSink, LogLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_one_line_per_kind_per_interval_and_the_held_back_lines_are_reported() -> None:
    clock = Clock()
    limiter = LogLimiter(60.0, clock)
    assert limiter.allow("a") == 0
    assert [limiter.allow("a") for _ in range(5)] == [None] * 5
    assert limiter.allow("b") == 0  # another kind has its own budget
    clock.now += 59.9
    assert limiter.allow("a") is None
    clock.now += 0.2
    assert limiter.allow("a") == 6  # the next line says how many were left out
    assert limiter.suppressed == 6


def test_kinds_past_the_cap_share_one_budget() -> None:
    limiter = LogLimiter(60.0, Clock())
    for i in range(MAX_LOG_KINDS):
        assert limiter.allow(i) == 0
    assert limiter.allow("new-1") == 0
    assert limiter.allow("new-2") is None


def test_zero_interval_logs_every_error() -> None:
    limiter = LogLimiter(0.0, Clock())
    assert [limiter.allow("a") for _ in range(3)] == [0, 0, 0]


def test_a_flood_of_one_failure_costs_one_log_line_and_every_error_is_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agg = Aggregates()
    sink = ErrorSink(agg, log_interval_s=60.0)
    with caplog.at_level(logging.WARNING, logger="handoffmon.pipeline"):
        for i in range(1000):
            sink.failed("rules", ValueError(f"bad declaration {i}"), "ignored invalid request rules")
        sink.failed("rules", KeyError("k"))  # another exception type: its own line
        sink.failed("parse", ValueError("x"))  # another stage: its own line
    lines = [r.getMessage() for r in caplog.records if r.name == "handoffmon.pipeline"]
    assert lines == [
        "handoffmon rules ignored invalid request rules: ValueError('bad declaration 0')",
        "handoffmon rules failed open: KeyError('k')",
        "handoffmon parse failed open: ValueError('x')",
    ]
    assert agg.snapshot().monitor_errors == {"rules": 1001, "parse": 1}
    assert sink.logs.suppressed == 999
