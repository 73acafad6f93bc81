"""``Monitor.capture``/``finish``: the request path keeps the history; the attribution thread reads it."""

from __future__ import annotations

import threading
from typing import Any

from handoffmon.ingress import Outcome
from handoffmon.pipeline.records import Capture, Deferred
from handoffmon.testing import RecordingExporter
from tests.pipeline.helpers import make_config, monitor, request


def test_capture_snapshots_the_message_list() -> None:
    """The application appends to its history after the call; the turn is still attributed as sent."""
    exp = RecordingExporter()
    with monitor(exporters=[exp], start=False) as m:
        history: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
        cap = m.capture(request(m, history))
        m.finish(cap, {"role": "assistant", "content": "hello"}, Outcome(authors=("a",)))
        history += [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "more"}]
        m.start()
        assert m.flush(10)
    assert [(r.context.depth, r.context.history_chars) for r in exp.results] == [(1, 2)]


def test_full_attribution_queue_sheds_the_turn_without_touching_the_request_path() -> None:
    """Overflow: the turn is dropped and counted, nothing is hashed; later turns see the reply as unknown."""
    exp = RecordingExporter()
    config = make_config(pipeline={"attribution_queue_size": 1})
    with monitor(config, exporters=[exp], start=False) as m:
        history: list[dict[str, Any]] = [{"role": "user", "content": "q1"}]
        for i, author in enumerate(["a", "b"]):  # the first fills the queue, the second overflows
            cap = m.capture(request(m, history))
            m.finish(cap, {"role": "assistant", "content": f"answer {i}"}, Outcome(authors=(author,)))
            history = [
                *history,
                {"role": "assistant", "content": f"answer {i}"},
                {"role": "user", "content": "q"},
            ]
        assert m.stats["attribution_overflows"] == 1
        assert m.attributor.pending == 0  # the shed reply was not recorded on the request path
        m.start()
        assert m.flush(10)
        cap = m.capture(request(m, history))
        m.finish(cap, {"role": "assistant", "content": "answer 2"}, Outcome(authors=("a",)))
        assert m.flush(10)
        snap = m.snapshot()
    assert snap.dropped == 1 and snap.total_turns == 2
    third = exp.results[-1].context
    assert [(a.author, a.method) for a in third.attributions] == [("a", "chain"), ("unknown", "unknown")]
    assert (third.depth, third.prefix_model) == (3, "unknown")  # depth still counted right
    assert exp.results[-1].record.handoff is None  # undecidable, not a false handoff
    assert exp.results[0].context.conversation_id == third.conversation_id


def test_deferred_outcome_is_read_on_the_attribution_thread() -> None:
    """A Deferred outcome is read later, off the request path; a failing reader is counted."""
    exp = RecordingExporter()
    threads: list[str] = []

    def describe(label: str) -> Outcome:
        threads.append(threading.current_thread().name)
        if label == "bad":
            raise RuntimeError("unreadable response")
        return Outcome(authors=("openai/m1",), deployment_id="dep-1", fallbacks=1, input_tokens=7)

    with monitor(exporters=[exp]) as m:
        for label in ("good", "bad"):
            cap = m.capture(request(m, [{"role": "user", "content": label}]))
            m.finish(cap, {"role": "assistant", "content": f"re {label}"}, Deferred(describe, (label,)))
        assert m.flush(10)
        snap = m.snapshot()
    assert threads and all(t.startswith("handoffmon-attribution") for t in threads)
    good, bad = (r.record for r in exp.results)
    assert (good.author, good.deployment_id, good.fallbacks, good.input_tokens) == (
        "openai/m1",
        "dep-1",
        1,
        7,
    )
    assert bad.author == "unknown"
    assert snap.monitor_errors == {"integration": 1} and snap.total_turns == 2


def test_capture_repr_carries_no_content() -> None:
    """Captures end up in logs and tracebacks: their repr names counts, never text."""
    with monitor() as m:
        cap = m.capture(request(m, [{"role": "user", "content": "secret plan"}]))
        assert isinstance(cap, Capture)
        assert "secret" not in repr(cap) and "messages=1" in repr(cap)
        m.finish(cap, "ok", Outcome(authors=("a",)))
