"""``Monitor.capture``: the request path keeps the history; the attribution thread attributes it."""

from __future__ import annotations

import threading
from typing import Any

from handoffmon.pipeline.turn import Capture, Described
from handoffmon.testing import RecordingExporter
from tests.pipeline.helpers import AUTHORS_4_7, make_config, monitor, run_conversation


def _facts(results: list[Any]) -> list[tuple[Any, ...]]:
    return [
        (
            r.context.depth,
            r.context.prefix_model,
            r.context.prefix_purity,
            r.context.conversation_id,
            r.record.author,
            r.record.handoff,
            tuple(a.method for a in r.context.attributions),
            tuple(c.verdict for c in r.checks),
        )
        for r in results
    ]


def test_captured_turns_are_attributed_exactly_like_begun_ones() -> None:
    """Same conversation through begin/finish and capture/finish: identical turns and counters."""
    outcomes = []
    for capture in (False, True):
        exp = RecordingExporter()
        with monitor(exporters=[exp]) as m:
            run_conversation(m, AUTHORS_4_7, capture=capture)
            assert m.flush(10)
            outcomes.append((_facts(exp.results), m.snapshot()))
    (begun, begun_snap), (captured, captured_snap) = outcomes
    assert captured == begun
    assert [f[0] for f in captured] == list(range(1, 11))
    assert [i + 1 for i, f in enumerate(captured) if f[5]] == [4, 7]
    assert captured_snap.turns == begun_snap.turns
    assert captured_snap.attributions == begun_snap.attributions == {"chain": sum(range(10))}
    assert captured_snap.checks == begun_snap.checks
    assert captured_snap.transitions == begun_snap.transitions


def test_capture_snapshots_the_message_list() -> None:
    """The application appends to its history after the call; the turn is still attributed as sent."""
    exp = RecordingExporter()
    with monitor(exporters=[exp], start=False) as m:
        history: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
        cap = m.capture(history, requested_model="g")
        m.finish(cap, {"role": "assistant", "content": "hello"}, authors=["a"])
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
            cap = m.capture(history, requested_model="g")
            m.finish(cap, {"role": "assistant", "content": f"answer {i}"}, authors=[author])
            history = [
                *history,
                {"role": "assistant", "content": f"answer {i}"},
                {"role": "user", "content": "q"},
            ]
        assert m.stats["attribution_overflows"] == 1
        assert m.attributor.pending == 0  # the shed reply was not recorded on the request path
        m.start()
        assert m.flush(10)
        cap = m.capture(history, requested_model="g")
        m.finish(cap, {"role": "assistant", "content": "answer 2"}, authors=["a"])
        assert m.flush(10)
        snap = m.snapshot()
    assert snap.dropped == 1 and snap.total_turns == 2
    third = exp.results[-1].context
    assert [(a.author, a.method) for a in third.attributions] == [("a", "chain"), ("unknown", "unknown")]
    assert (third.depth, third.prefix_model) == (3, "unknown")  # depth still counted right
    assert exp.results[-1].record.handoff is None  # undecidable, not a false handoff
    assert exp.results[0].context.conversation_id == third.conversation_id


def test_describe_runs_on_the_attribution_thread() -> None:
    """finish_described reads the response later, off the request path; a failing reader is counted."""
    exp = RecordingExporter()
    threads: list[str] = []

    def describe(label: str) -> Described:
        threads.append(threading.current_thread().name)
        if label == "bad":
            raise RuntimeError("unreadable response")
        return Described(authors=("openai/m1",), deployment_id="dep-1", fallbacks=1, input_tokens=7)

    with monitor(exporters=[exp]) as m:
        for label in ("good", "bad"):
            cap = m.capture([{"role": "user", "content": label}], requested_model="g")
            m.finish_described(cap, {"role": "assistant", "content": f"re {label}"}, describe, (label,))
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
        cap = m.capture([{"role": "user", "content": "secret plan"}], requested_model="g")
        assert isinstance(cap, Capture)
        assert "secret" not in repr(cap) and "messages=1" in repr(cap)
        m.finish(cap, "ok", authors=["a"])


def test_capture_takes_the_callers_span_on_the_request_path() -> None:
    """The current OTel span is read at capture time; the background context carries it."""
    from opentelemetry.sdk.trace import TracerProvider

    exp = RecordingExporter()
    tracer = TracerProvider().get_tracer("t")
    with monitor(make_config(telemetry={"otel": True}), exporters=[exp], start=False) as m:
        with tracer.start_as_current_span("request") as span:
            cap = m.capture([{"role": "user", "content": "x"}], requested_model="g")
            trace_id = format(span.get_span_context().trace_id, "032x")
        m.finish(cap, "ok", authors=["a"])  # after the span ended, on purpose
        m.start()
        assert m.flush(10)
    assert str(exp.results[0].context.metadata["traceparent"]).split("-")[1] == trace_id
