"""A shadow call past its deadline: counted ``timeout`` and left behind, never holding a shadow
thread. HTTP clients bound each read by ``timeout_s``, not the call: a target trickling its reply
held a ``litellm.completion`` with ``timeout_s`` 1 for 76 s, and the shadow thread with it."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from handoffmon.config import ShadowConfig
from handoffmon.runtime.shadow import DEADLINE_SLACK_S, ShadowRunner
from handoffmon.shadow.turns import ShadowOffer, ShadowReply, ShadowTurn
from handoffmon.types import CheckResult


class _Trickling:
    """Answers only once ``release`` is set (a target that never finishes its reply until then)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.running = self.started = 0

    def call(self, target: str, messages: list[Any], *, max_tokens: int, timeout_s: float) -> ShadowReply:
        with self.lock:
            self.running += 1
            self.started += 1
        try:
            self.release.wait(30)
            return ShadowReply("ok", target, 10.0, None)
        finally:
            with self.lock:
                self.running -= 1

    def candidates(self, model: str) -> Sequence[str]:
        return ("b",)

    def prices(self, model: str) -> tuple[float, float] | None:
        return None


def _config(**limits: Any) -> ShadowConfig:
    return ShadowConfig(
        enabled=True, targets=["b"], sample_rate=1.0, usd_per_day=None, queue_size=8,
        calls_per_minute=1000, pair_calls_per_hour=1000, **limits,
    )  # fmt: skip


def _turn(source: _Trickling, i: int) -> ShadowTurn:
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    served = (CheckResult("r", "pass"),)
    return ShadowTurn(
        ShadowOffer(source, messages), f"conv-{i}", "a", "a", served, lambda _t: (CheckResult("r", "fail"),)
    )


def test_a_call_past_its_deadline_is_a_timeout_and_frees_its_shadow_thread() -> None:
    """Two shadow threads, timeout_s 0.2: the two hanging calls are counted ``timeout`` after
    0.2 + 1 s and the threads move on; while both still run, no further call starts (skipped
    ``busy``: calls left running never outnumber ``max_concurrency``). Once they end, calls
    start again."""
    cfg = _config(timeout_s=0.2, max_concurrency=2, breaker_failures=10)
    source = _Trickling()
    runner = ShadowRunner(cfg)
    started = time.monotonic()
    for i in range(4):
        runner.offer(_turn(source, i))
    assert runner.flush(5)
    took = time.monotonic() - started
    stats = runner.stats
    assert stats.calls == {("no_handoff", "timeout"): 2}
    assert stats.skipped == {"busy": 2}
    assert source.started == 2 and source.running == 2  # left behind, still running
    assert cfg.timeout_s + DEADLINE_SLACK_S <= took < cfg.timeout_s + DEADLINE_SLACK_S + 1.5, took
    source.release.set()
    deadline = time.monotonic() + 5
    while source.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert source.running == 0
    time.sleep(0.05)  # the finished calls give their slots back
    runner.offer(_turn(source, 9))
    assert runner.flush(5)
    assert runner.stats.calls == {("no_handoff", "timeout"): 2, ("no_handoff", "ok"): 1}
    assert runner.stats.pairs == {"no_handoff": 1}  # the late replies formed no pair
    runner.close(5)


def test_the_deadlines_trip_the_breaker() -> None:
    """Timeouts past the deadline count as the target's failures: after ``breaker_failures`` of
    them its shadow traffic stops (``breaker_open``) instead of taking a thread per sampled turn."""
    cfg = _config(timeout_s=0.1, max_concurrency=4, breaker_failures=2)
    source = _Trickling()
    runner = ShadowRunner(cfg)
    for i in range(2):
        runner.offer(_turn(source, i))
    assert runner.flush(5)
    runner.offer(_turn(source, 5))
    assert runner.flush(5)
    assert runner.stats.calls == {("no_handoff", "timeout"): 2}
    assert runner.stats.skipped == {"breaker_open": 1}
    assert runner.stats.breaker_open == {"b": 1}
    source.release.set()
    runner.close(5)


def test_a_forked_child_starts_with_every_slot_free() -> None:
    """A child forked while the parent's only shadow call runs: that call's thread does not exist
    in the child, so its slot is free there (else the child skipped every pick as ``busy``)."""
    import os

    cfg = _config(timeout_s=5.0, max_concurrency=1, breaker_failures=10)
    source = _Trickling()
    runner = ShadowRunner(cfg)
    runner.offer(_turn(source, 0))
    deadline = time.monotonic() + 5
    while not source.started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert source.started == 1
    pid = os.fork()
    if pid == 0:  # the child: exit status says whether a call could start
        runner.after_fork()
        os._exit(0 if runner._deadlines.acquire(blocking=False) else 1)
    _, status = os.waitpid(pid, 0)
    source.release.set()
    runner.close(5)
    assert os.waitstatus_to_exitcode(status) == 0
