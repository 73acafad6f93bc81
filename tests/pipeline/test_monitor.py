"""The Monitor end to end: depth/prefix/handoff, rules and state, fail-open faults, shutdown, persistence."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from handoffmon.checkers import CheckOutcome, RuleSet, default_registry
from handoffmon.config import RuleConfig
from handoffmon.counts import CheckKey, TransitionKey, TurnKey
from handoffmon.exporters.prometheus import PrometheusExporter
from handoffmon.ingress import Outcome
from handoffmon.pipeline.aggregates import load_counts_sqlite
from handoffmon.pipeline.monitor import Monitor
from handoffmon.pipeline.records import Deferred
from handoffmon.testing import RecordingExporter
from handoffmon.types import TurnResult
from tests.pipeline.helpers import (
    AUTHORS_4_7,
    BrokenStore,
    FailingExporter,
    HangingExporter,
    RaisingExporter,
    make_config,
    monitor,
    raising_rules,
    request,
    run_conversation,
    turn,
)


def test_ten_turns_with_changes_at_4_and_7() -> None:
    """Depth, prefix model and handoff flags are right at every turn, and aggregates count exactly."""
    exp = RecordingExporter()
    with monitor(exporters=[exp]) as m:
        run_conversation(m, AUTHORS_4_7)
        assert m.flush(10)
        snap = m.snapshot()
    contexts = [r.context for r in exp.results]
    assert [c.depth for c in contexts] == list(range(1, 11))
    assert [c.prefix_model for c in contexts] == ["none", "a", "a", "a", "b", "b", "b", "a", "a", "a"]
    handoffs = [r.record.handoff for r in exp.results]
    assert [i + 1 for i, h in enumerate(handoffs) if h] == [4, 7]
    assert handoffs.count(False) == 8
    assert len({r.context.conversation_id for r in exp.results}) == 1
    assert snap.turns == {
        TurnKey("a", "none", "1", "false"): 1,
        TurnKey("a", "a", "2", "false"): 1,
        TurnKey("a", "a", "3-4", "false"): 1,
        TurnKey("b", "a", "3-4", "true"): 1,
        TurnKey("b", "b", "5-8", "false"): 2,
        TurnKey("a", "b", "5-8", "true"): 1,
        TurnKey("a", "a", "5-8", "false"): 1,
        TurnKey("a", "a", "9-12", "false"): 2,
    }
    # every earlier assistant message of every request was attributed by the chain
    assert snap.attributions == {"chain": sum(range(10))}
    assert sum(snap.checks.values()) == 10
    assert sum(snap.transitions.values()) == 9
    assert snap.session_lengths == {10: 1}  # one conversation, now 10 turns long
    assert snap.monitor_errors == {} and snap.dropped == 0


def test_verdicts_and_transitions_follow_the_replies() -> None:
    """A ≤5-word rule passes short replies and fails long ones; transitions carry handoff labels."""
    replies = ["ok", "ok", "this reply is far too long to pass", "ok"]
    with monitor() as m:
        run_conversation(m, ["a", "a", "b", "b"], replies)
        m.flush(10)
        snap = m.snapshot()
    assert snap.checks[CheckKey("short", "b", "a", "3-4", "fail")] == 1
    assert snap.checks[CheckKey("short", "b", "b", "3-4", "pass")] == 1
    assert snap.transitions == {
        TransitionKey("short", "a", "false", "pass", "pass"): 1,
        TransitionKey("short", "b", "true", "pass", "fail"): 1,
        TransitionKey("short", "b", "false", "fail", "pass"): 1,
    }


def test_request_rules_accumulate_from_the_turn_they_are_declared() -> None:
    """A rule declared in turn 2's metadata is checked at turns 2..4, even when not resent."""
    rule = {"name": "says_ok", "check": "keywords_present", "params": {"keywords": ["ok"]}}
    meta: list[Any] = [None, {"handoffmon": {"rules": [rule]}}, None, None]
    exp = RecordingExporter()
    with monitor(make_config(rules=[]), exporters=[exp]) as m:
        run_conversation(m, ["a"] * 4, ["ok", "ok", "nope", "ok"], metadata=meta)
        m.flush(10)
    verdicts = [[(c.rule, c.verdict) for c in r.checks] for r in exp.results]
    assert verdicts == [[], [("says_ok", "pass")], [("says_ok", "fail")], [("says_ok", "pass")]]


def test_invalid_request_rule_is_counted_and_ignored() -> None:
    """An unknown checker in request metadata counts monitor_errors{rules}; configured rules still run."""
    meta = [{"handoffmon": {"rules": [{"name": "x", "check": "no_such_checker"}]}}]
    with monitor() as m:
        run_conversation(m, ["a"], ["ok"], metadata=meta)
        m.flush(10)
        snap = m.snapshot()
    assert snap.monitor_errors == {"rules": 1}
    assert sum(snap.checks.values()) == 1


def test_extracted_answer_reaches_the_next_turn() -> None:
    """answer_flip sees the previous turn's extracted answer: a changed answer after a challenge fails."""
    rule = RuleConfig(name="flip", check="answer_flip", params={})
    exp = RecordingExporter()
    m = monitor(make_config(rules=[rule.model_dump()]), exporters=[exp])
    history: list[dict[str, str]] = [{"role": "user", "content": "2+2?"}]
    for reply, user_next in (("<answer>4</answer>", "are you sure?"), ("<answer>5</answer>", "thanks")):
        turn(m, history, reply, "a")
        history += [{"role": "assistant", "content": reply}, {"role": "user", "content": user_next}]
    m.close()
    assert [r.checks[0].verdict for r in exp.results] == ["not_applicable", "fail"]


def test_raising_checker_gives_error_verdict_and_counts() -> None:
    """A checker that raises yields an ``error`` verdict and monitor_errors{check}; the turn is counted."""
    with monitor(rules=raising_rules()) as m:
        run_conversation(m, ["a", "a"])
        m.flush(10)
        snap = m.snapshot()
    assert snap.checks == {
        CheckKey("boom", "a", "none", "1", "error"): 1,
        CheckKey("boom", "a", "a", "2", "error"): 1,
    }
    assert snap.monitor_errors == {"check": 2}
    assert snap.total_turns == 2


def test_a_reply_too_long_for_its_checker_is_an_error_verdict_not_a_monitor_failure() -> None:
    """A sentence count on a reply too long for its budget is refused (``error``/``too_large``)
    without running: the verdict says so, but it is a limit at work, not handoffmon failing, so
    it is not in monitor_errors (which MonitorErrors pages on). A checker that raises still is
    (``test_raising_checker_gives_error_verdict_and_counts``)."""
    rules = [{"name": "sentences", "check": "length", "params": {"unit": "sentences", "max": 3}}]
    exp = RecordingExporter()
    long_reply = "A sentence here. " * 20_000  # 340,000 characters: past the sentence count's limit
    with monitor(make_config(rules=rules, pipeline={"check_budget_s": 0.05}), exporters=[exp]) as m:
        run_conversation(m, ["a"], replies=[long_reply])
        assert m.flush(30)
        snap = m.snapshot()
    assert [(c.verdict, c.reason) for r in exp.results for c in r.checks] == [("error", "too_large")]
    assert snap.checks == {CheckKey("sentences", "a", "none", "1", "error"): 1}
    assert snap.monitor_errors == {}


def _slow_and_raising_rules() -> RuleSet:
    """``slow`` burns 30 ms of CPU (its budget is 10 ms), ``boom`` raises."""
    reg = default_registry()

    def slow(p: Any) -> Any:
        def check(reply: str, ctx: Any) -> Any:
            end = time.thread_time() + 0.03
            while time.thread_time() < end:
                pass
            return CheckOutcome("pass")

        return check

    def boom(p: Any) -> Any:
        def check(reply: str, ctx: Any) -> Any:
            raise RuntimeError("checker bug")

        return check

    reg.register("slow", slow)
    reg.register("boom", boom)
    rules = [RuleConfig(name="slow", check="slow"), RuleConfig(name="boom", check="boom")]
    return RuleSet.from_config(rules, registry=reg, budget_s=0.01)


def test_a_check_over_its_budget_is_a_limit_shown_by_reason_not_a_monitor_failure() -> None:
    """A check that used more CPU than its budget is ``error``/``over_budget``: a limit found
    after the fact, like ``too_large``, so it no longer pages MonitorErrors (a CPU-starved host
    makes checks cost more CPU); ``handoffmon_check_errors_total{rule, reason}`` shows it, beside
    a raising checker's ``raised``, which still counts in monitor_errors."""
    registry = CollectorRegistry()
    prom = PrometheusExporter(registry)
    with monitor(rules=_slow_and_raising_rules(), exporters=[prom]) as m:
        run_conversation(m, ["a"])
        assert m.flush(10)
        snap = m.snapshot()
    assert snap.monitor_errors == {"check": 1}  # boom's; slow's is not a failure

    def errors(rule: str, reason: str) -> float | None:
        return registry.get_sample_value("handoffmon_check_errors_total", {"rule": rule, "reason": reason})

    assert errors("slow", "over_budget") == 1.0
    assert errors("boom", "raised") == 1.0
    assert registry.get_sample_value("handoffmon_monitor_errors_total", {"stage": "check"}) == 1.0


def test_store_failures_fail_open_and_are_counted() -> None:
    """A store that raises on every call: every turn is still counted, failures are counted once.

    The guard counts each failed call as monitor_errors{store} (and by op in its stats),
    backs off after three in a row (``skipped``), and the callers fail open: replies this
    process recorded stay attributable from the in-process overlay, a history the overlay
    does not know is ``unknown``.
    """
    store = BrokenStore(fail=["get_many", "put_many", "get_state", "put_state"])
    exp = RecordingExporter()
    with monitor(store=store, exporters=[exp]) as m:
        run_conversation(m, ["a", "b", "b"])
        turn(m, [{"role": "user", "content": "q"}, {"role": "assistant", "content": "never seen"}], "r", "c")
        m.flush(10)
        snap = m.snapshot()
        stats = m.store.stats()
    contexts = [r.context for r in exp.results]
    assert [(c.depth, c.prefix_model) for c in contexts] == [(1, "none"), (2, "a"), (3, "b"), (2, "unknown")]
    assert snap.total_turns == 4
    failed = sum(n for k, n in stats.items() if not k.endswith("_skipped"))
    assert failed >= 3 and snap.monitor_errors == {"store": failed}
    assert sum(n for k, n in stats.items() if k.endswith("_skipped")) >= 1  # the guard backed off


def test_full_queue_drops_and_counts_without_blocking() -> None:
    """queue_size=2 with workers not started: the third finish returns at once and counts a drop."""
    m = monitor(make_config(pipeline={"queue_size": 2}), start=False)
    t0 = time.perf_counter()
    run_conversation(m, ["a", "a", "a", "a"])
    assert time.perf_counter() - t0 < 0.5
    m.close(10)
    snap = m.snapshot()
    assert snap.dropped == 2
    assert snap.total_turns == 2


def test_hanging_exporter_stalls_nothing_and_is_counted() -> None:
    """A hung exporter: other exporters and aggregates get every turn; overflow and close are counted."""
    hung, good = HangingExporter(), RecordingExporter()
    m = monitor(make_config(pipeline={"export_queue_size": 4}), exporters=[good, hung])
    for i in range(3):
        run_conversation(m, ["a", "a"], user=f"conversation {i}")
        _wait_until(lambda i=i: len(good.results) == 2 * (i + 1))  # good's own buffer never overflows
    assert hung.entered.wait(5)
    assert m.flush(0.3) is False  # the hung exporter never drains
    snap = m.snapshot()
    assert snap.total_turns == 6
    assert len(good.results) == 6
    t0 = time.perf_counter()
    m.close(0.5)
    assert time.perf_counter() - t0 < 3
    # 6 results: 1 stuck in export + 4 queued; 1 overflowed; plus the 5 left behind at close
    assert m.snapshot().monitor_errors == {"export": 6}
    assert good.shut and not hung.shut
    hung.release.set()


def _hanging_rules(release: threading.Event, entered: threading.Event) -> RuleSet:
    """One rule, ``hang``, whose checker blocks on its first reply until ``release`` is set."""
    reg = default_registry()

    def factory(p: Any) -> Any:
        def check(reply: str, ctx: Any) -> Any:
            if not entered.is_set():
                entered.set()
                release.wait(30)
            return CheckOutcome("pass")

        return check

    reg.register("hang", factory)
    return RuleSet.from_config([RuleConfig(name="hang", check="hang")], registry=reg)


def _turns_of(m: Monitor, n: int) -> None:
    for i in range(n):
        turn(m, [{"role": "user", "content": f"conversation {i}"}], "ok", "a", metadata={"session_id": "s"})


@pytest.mark.parametrize("workers", [1, 2], ids=["attribution-thread-checks", "check-threads"])
def test_turns_still_queued_when_close_runs_out_are_counted_one_by_one(
    workers: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A check that hangs on the first of 5 turns and ``close(0.3)``: the 4 turns still queued
    (behind the attribution thread running checks, or in the check thread's queue) are each
    counted once as dropped and lost at close — no ``pipeline`` error, not an overflow — and
    logged as lost; the turn in progress is recorded when its check returns, not counted lost.
    (Before: one ``pipeline`` error for all of them, and the 4 were still handled after close.)"""
    release, entered = threading.Event(), threading.Event()
    m = monitor(make_config(pipeline={"workers": workers}), rules=_hanging_rules(release, entered))
    _turns_of(m, 5)
    assert entered.wait(5)
    with caplog.at_level(logging.WARNING, logger="handoffmon.pipeline"):
        m.close(0.3)
    assert "4 turn(s) lost at shutdown" in caplog.text
    release.set()
    assert m._front.close(5) and m._pool.close(5)  # the threads end after the turn in progress
    snap = m.snapshot()
    assert (snap.dropped, m.lost_at_close, m.attribution_overflows) == (4, 4, 0)
    assert snap.total_turns == 1 and "pipeline" not in snap.monitor_errors


def test_turns_lost_at_shutdown_reach_the_exporters_before_they_close() -> None:
    """What an operator reads: ``handoffmon_queue_dropped_total`` carries the 4 turns lost by a
    ``close(0.3)`` (counted before the exporters shut down), ``monitor_errors{pipeline}`` none."""
    release, entered = threading.Event(), threading.Event()
    registry = CollectorRegistry()
    m = monitor(rules=_hanging_rules(release, entered), exporters=[PrometheusExporter(registry)])
    _turns_of(m, 5)
    assert entered.wait(5)
    m.close(0.3)
    release.set()
    assert registry.get_sample_value("handoffmon_queue_dropped_total") == 4.0
    assert registry.get_sample_value("handoffmon_monitor_errors_total", {"stage": "pipeline"}) == 0.0


def test_a_turn_finished_after_close_or_left_in_attribution_is_lost_once() -> None:
    """Reading who served the first of 5 turns hangs (on the attribution thread) and
    ``close(0.3)``: 4 are lost at close, the one in attribution when it returns (the check queue
    is closed by then), and a turn finished after close: 6 dropped, 6 lost at close, none an
    attribution overflow. (Before: the late turn counted in ``dropped`` and in
    ``attribution_overflows``, and the close as a ``pipeline`` error.)"""
    release, entered = threading.Event(), threading.Event()

    def describe() -> Outcome:
        entered.set()
        release.wait(30)
        return Outcome(authors=("a",))

    m = monitor(make_config())
    m.finish(m.capture(request(m, [{"role": "user", "content": "hanging"}])), "ok", Deferred(describe, ()))
    _turns_of(m, 4)
    assert entered.wait(5)
    m.close(0.3)
    assert (m.snapshot().dropped, m.lost_at_close) == (4, 4)
    release.set()
    assert m._front.close(5)
    _turns_of(m, 1)
    snap = m.snapshot()
    assert (snap.dropped, m.lost_at_close, m.attribution_overflows) == (6, 6, 0)
    assert snap.total_turns == 0 and "pipeline" not in snap.monitor_errors


def _wait_until(cond: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def test_raising_and_failing_exporters_are_counted() -> None:
    """An exporter that raises and one that returns False each count one export error per turn."""
    with monitor(exporters=[RaisingExporter(), FailingExporter()]) as m:
        run_conversation(m, ["a", "a"])
        m.flush(10)
        snap = m.snapshot()
    assert snap.monitor_errors == {"export": 4}
    assert snap.total_turns == 2


class Observer(RecordingExporter):
    """An exporter that also observes monitor health."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[str] = []
        self.drops = 0
        self.stages: set[str] = set()

    def observe_overhead(self, stage: str, seconds: float) -> None:
        assert seconds >= 0
        self.stages.add(stage)

    def count_error(self, stage: str) -> None:
        self.errors.append(stage)

    def count_drop(self, n: int = 1) -> None:
        self.drops += n


def test_observer_exporters_receive_errors_drops_and_overheads() -> None:
    """MonitorObserver exporters get every counted error and drop and the stage overheads."""
    obs = Observer()
    m = monitor(make_config(pipeline={"queue_size": 1}), exporters=[obs], rules=raising_rules(), start=False)
    run_conversation(m, ["a", "a"])
    m.close(10)
    assert obs.drops == 1
    assert obs.errors == ["check"]
    assert {"attribution", "finish", "background"} <= obs.stages


def test_sqlite_backend_restart_loses_nothing(tmp_path: Path) -> None:
    """With store.backend=sqlite, a new monitor on the same file continues the conversation and the counts."""
    cfg = make_config(store={"backend": "sqlite", "path": str(tmp_path / "hm.db")})
    history = [{"role": "user", "content": "hi"}]
    with Monitor(cfg) as m1:
        turn(m1, history, "first reply", "a")
    history += [{"role": "assistant", "content": "first reply"}, {"role": "user", "content": "more"}]
    exp = RecordingExporter()
    with Monitor(cfg, exporters=[exp]) as m2:
        turn(m2, history, "second reply", "b")
    assert [(r.context.depth, r.context.prefix_model) for r in exp.results] == [(2, "a")]
    counts = load_counts_sqlite(tmp_path / "hm.db")
    assert counts.turns == {TurnKey("a", "none", "1", "false"): 1, TurnKey("b", "a", "2", "true"): 1}
    assert sum(counts.transitions.values()) == 1  # the last verdict survived the restart


def test_finish_never_raises_on_garbage() -> None:
    """finish with an unreadable reply and odd authors: the turn is counted, author unknown."""
    with monitor() as m:
        cap = m.capture(request(m, [{"role": "user", "content": "x"}]))
        m.finish(cap, object(), Outcome(authors=("", None)))  # type: ignore[arg-type]
        m.flush(10)
        snap = m.snapshot()
    assert snap.total_turns == 1
    assert next(iter(snap.turns)).model == "unknown"


def test_unreadable_history_is_counted_as_a_degraded_turn() -> None:
    """messages that are not a list: the turn still counts, with a depth-1 degraded context."""
    exp = RecordingExporter()
    with monitor(exporters=[exp]) as m:
        turn(m, "not a message list", "reply", "a")  # type: ignore[arg-type]
        assert m.flush(10)
    (result,) = exp.results
    assert result.context.degraded and result.context.depth == 1 and result.record.author == "a"


def test_atexit_hook_drains_an_unclosed_monitor() -> None:
    """The process-exit hook closes a monitor nobody closed, so queued turns still get counted."""
    m = monitor(start=False)
    run_conversation(m, ["a", "a"])
    assert m.stats == {
        "monitor_errors": {},
        "dropped": 0,
        "pending": 2,
        "attribution_overflows": 0,
        "lost_at_close": 0,
    }
    m._atexit()  # what atexit runs at interpreter exit
    assert m.closed
    assert m.snapshot().total_turns == 2


def test_close_is_idempotent_and_unregisters_atexit() -> None:
    """close() twice is fine; turns finished after close are dropped, not raised."""
    m = monitor()
    m.close()
    m.close()
    assert m.closed
    turn(m, [{"role": "user", "content": "late"}], "late reply", "a")
    assert m.snapshot().dropped == 1


def test_capture_content_puts_text_on_the_result_only() -> None:
    """With telemetry.capture_content the result carries the messages and reply as content only."""
    exp = RecordingExporter()
    with monitor(make_config(telemetry={"capture_content": True}), exporters=[exp]) as m:
        run_conversation(m, ["a", "a"], ["first answer", "second answer"])
        m.flush(10)
    second = exp.results[1]
    assert second.content is not None
    assert [x.content for x in second.content.input_messages] == ["hello", "first answer", "next 0"]
    assert second.content.output_text == "second answer"
    assert second.context.input_messages == () and second.context.user_message == ""


def test_context_keeps_only_the_metadata_handoffmon_reads() -> None:
    """Arbitrary caller metadata is dropped; rules, tags, route, ids and a traceparent header stay."""
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    exp = RecordingExporter()
    with monitor(exporters=[exp]) as m:
        turn(
            m,
            [{"role": "user", "content": "x"}],
            "ok",
            "a",
            metadata={"user_email": "a@b.c", "tags": ["t"], "route": "r", "conversation_id": "c1"},
            headers={"TraceParent": tp},
        )
        assert m.flush(10)
    meta = dict(exp.results[0].context.metadata)
    assert meta == {"tags": ["t"], "route": "r", "conversation_id": "c1", "traceparent": tp}


def test_otel_current_span_becomes_the_turn_traceparent() -> None:
    """With telemetry.otel the caller's current span is read at capture time, on the request path."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    tracer = TracerProvider().get_tracer("t")
    exp = RecordingExporter()
    with monitor(make_config(telemetry={"otel": True}), exporters=[exp], start=False) as m:
        with tracer.start_as_current_span("request") as span:
            cap = m.capture(request(m, [{"role": "user", "content": "x"}]))
            trace_id = format(span.get_span_context().trace_id, "032x")
        m.finish(cap, "ok", Outcome(authors=("a",)))  # after the span ended, on purpose
        assert trace.get_current_span() is not span
        m.start()
        assert m.flush(10)
    assert str(exp.results[0].context.metadata["traceparent"]).split("-")[1] == trace_id


def test_results_carry_no_message_text() -> None:
    """TurnResults handed to exporters carry no reply or message content (content=None by default)."""
    exp = RecordingExporter()
    with monitor(exporters=[exp]) as m:
        run_conversation(m, ["a"], ["a secret reply"])
        m.flush(10)
    r: TurnResult = exp.results[0]
    assert r.content is None and r.context.user_message == ""
    assert "secret" not in repr(r)
