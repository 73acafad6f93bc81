"""``pipeline.max_queued_bytes``: the raw bodies turns hold on their way through the pipeline
(``serve`` parses them on the attribution thread) are bounded; a turn past the budget is dropped
and counted as from a full queue, and every byte a turn took is given back whichever way it
leaves the pipeline (checked, nothing to record, a failing read, a full check queue)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from handoffmon.ingress import Outcome
from handoffmon.pipeline.monitor import Monitor
from handoffmon.pipeline.records import Deferred
from handoffmon.pipeline.worker import ByteBudget
from handoffmon.stores.memory import MemoryStore
from handoffmon.testing import RecordingExporter
from tests.pipeline.helpers import make_config, request

REPLY = {"role": "assistant", "content": "fine"}


def _monitor(**pipeline: Any) -> tuple[Monitor, RecordingExporter]:
    """A monitor whose threads are not started (two check workers: none driven by the
    attribution thread), so the test decides when each stage runs."""
    exp = RecordingExporter()
    cfg = make_config(pipeline={"workers": 2, **pipeline})
    return Monitor(cfg, exporters=[exp], store=MemoryStore(), start=False), exp


def _finish(m: Monitor, i: int, weight: int) -> None:
    cap = m.capture(request(m, [{"role": "user", "content": f"conversation {i}"}]))
    m.finish(cap, REPLY, Outcome(("m1",)), weight=weight)


def test_turns_past_the_budget_are_dropped_counted_and_their_bytes_given_back_once_checked() -> None:
    """Budget 1,000: of four 400-byte turns two are queued and two dropped (counted as dropped);
    unweighted turns (the in-process wrappers') are never held back; once checked, nothing is held."""
    m, exp = _monitor(max_queued_bytes=1000)
    try:
        for i in range(4):
            _finish(m, i, 400)
        _finish(m, 4, 0)
        assert m.queued_bytes.held == 800
        assert m.snapshot().dropped == 2 and m.attribution_overflows == 2
        assert m._front.run_pending() == 3
        assert m.queued_bytes.held == 800  # attributed, waiting for the checks: still held
        m.start()
        assert m.flush(10)
        assert m.queued_bytes.held == 0
        assert len(exp.results) == 3
    finally:
        m.close()


def test_every_way_out_of_the_pipeline_gives_the_bytes_back() -> None:
    """A read with nothing to record, a read that raises, a turn the full check queue drops and
    a streamed turn read later with a shadow offer slot: each takes its weight and gives it back."""
    m, exp = _monitor(max_queued_bytes=10_000, queue_size=1)
    try:

        def nothing() -> None:
            return None

        def broken() -> Any:
            raise ValueError("unreadable")

        def streamed(i: int) -> Any:
            # one conversation: both turns go to the same check worker's one-slot queue
            messages = [{"role": "user", "content": f"streamed {i}"}]
            cap = m.capture(request(m, messages, metadata={"conversation_id": "one"}))
            return cap, REPLY, Deferred(Outcome, (("m1",),)), 0.1, None

        m.finish_later(nothing, (), weight=100)
        m.finish_later(broken, (), weight=200)
        m.finish_later(streamed, (1,), streamed=True, weight=300)
        m.finish_later(streamed, (2,), streamed=True, weight=400)  # the check queue (1 slot) is full
        assert m.queued_bytes.held == 1000
        assert m._front.run_pending() == 4
        assert m.queued_bytes.held == 300  # the one turn in the check queue
        assert m.snapshot().dropped == 1
        m.start()
        assert m.flush(10)
        assert m.queued_bytes.held == 0
        assert [r.record.streamed for r in exp.results] == [True]
        assert m.snapshot().monitor_errors.get("integration") == 1  # the read that raised
    finally:
        m.close()


def test_the_budget_is_exact_under_threads() -> None:
    """Four threads taking and giving back: the budget never passes its limit and ends at 0."""
    budget, seen = ByteBudget(1000), []

    def churn() -> None:
        for _ in range(20_000):
            if budget.take(300):
                seen.append(budget.held)
                budget.give(300)

    threads = [threading.Thread(target=churn) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert budget.held == 0
    assert seen and max(seen) <= 900


@pytest.mark.parametrize("value", [0, -1])
def test_the_budget_must_be_positive(value: int) -> None:
    """A zero or negative ``pipeline.max_queued_bytes`` is refused, naming the key."""
    from handoffmon.errors import ConfigError

    with pytest.raises(
        ConfigError, match=r"key 'pipeline\.max_queued_bytes': Input should be greater than 0"
    ):
        make_config(pipeline={"max_queued_bytes": value})
