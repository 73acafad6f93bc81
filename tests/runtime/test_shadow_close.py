"""``ShadowRunner``: no shadow call starts after ``close``'s timeout; a call that was not sent is
counted under the reason its ``NoRoute`` names (``serve``'s full upstream: ``busy``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from handoffmon.config import config_from_mapping
from handoffmon.runtime.shadow import ShadowRunner
from handoffmon.shadow.policy import SKIP_REASONS
from handoffmon.shadow.turns import NoRoute, ShadowOffer, ShadowReply, ShadowTurn

HISTORY = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]


class _Source:
    """A shadow source whose calls record when they started; ``raises`` is raised instead of
    answering, and the first call waits for ``release`` when ``hold`` is set."""

    def __init__(self, *, hold: bool = False, raises: BaseException | None = None) -> None:
        self.started: list[float] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self._hold = hold
        self._raises = raises

    def call(self, target: str, messages: list[Any], *, max_tokens: int, timeout_s: float) -> ShadowReply:
        self.started.append(time.monotonic())
        if self._raises is not None:
            raise self._raises
        if self._hold and len(self.started) == 1:
            self.entered.set()
            assert self.release.wait(10)
        return ShadowReply("fine", None, 10.0, 0.0)

    def candidates(self, model: str) -> Sequence[str]:
        return ()

    def prices(self, model: str) -> tuple[float, float] | None:
        return None


SHADOW = {"enabled": True, "sample_rate": 1.0, "targets": ["model-c"], "arms": ["handoff"]}
"""Every handoff turn continued by model-c."""


def _runner(**start: Any) -> ShadowRunner:
    """One shadow thread; no money cap (the source has no prices)."""
    shadow = {**SHADOW, "max_concurrency": 1, "usd_per_day": None}
    return ShadowRunner(config_from_mapping({"shadow": shadow}).shadow, **start)


def _turn(source: _Source, i: int) -> ShadowTurn:
    """A handoff turn (model-c wrote the history, model-b served) of conversation ``c<i>``."""
    return ShadowTurn(ShadowOffer(source, HISTORY), f"c{i}", "model-c", "model-b", (), lambda _t: ())


def test_no_shadow_call_starts_after_close_timed_out() -> None:
    """10 turns queued behind a call in flight and ``close(0.3)``: the call in flight ends, and the
    9 queued calls, which the threads (outliving the timed-out close) used to make after close
    returned (8 of 10 measured with ``close(0.5)``), are skipped as ``shutdown``, their
    reservations given back. A turn offered after close is ``shutdown`` too, not ``busy``."""
    source = _Source(hold=True)
    runner = _runner()
    for i in range(10):
        runner.offer(_turn(source, i))
    assert source.entered.wait(10)
    assert runner.stats.budget_used["calls"] == 10
    assert runner.close(0.3) is False  # the first call is still in flight
    closed_at = time.monotonic()
    source.release.set()
    assert runner.flush(10)
    assert [t for t in source.started if t >= closed_at] == []
    stats = runner.stats
    assert len(source.started) == 1 and stats.calls == {("handoff", "ok"): 1}
    assert stats.skipped == {"shutdown": 9}
    assert stats.budget_used["calls"] == 1  # the 9 reservations were given back
    runner.offer(_turn(source, 10))
    assert runner.stats.skipped == {"shutdown": 10} and len(source.started) == 1


def test_a_close_with_time_left_makes_the_queued_calls() -> None:
    """Calls queued at ``close`` that start within its timeout are made, as before."""
    source = _Source()
    runner = _runner(start=False)
    for i in range(3):
        runner.offer(_turn(source, i))
    runner.start()
    assert runner.close(10) is True
    assert len(source.started) == 3 and runner.stats.calls == {("handoff", "ok"): 3}
    assert "shutdown" not in runner.stats.skipped


class _Elsewhere(NoRoute):
    reason = "no_such_reason"


@pytest.mark.parametrize(
    ("raised", "reason"),
    [(NoRoute("gone"), "no_route"), (_Elsewhere("?"), "no_route")],
)
def test_a_call_not_sent_is_counted_under_its_no_routes_reason(raised: NoRoute, reason: str) -> None:
    """The reason comes from the exception (``NoRoute.reason``), bounded to ``SKIP_REASONS``; the
    reservation and the breaker's probe are given back."""
    source = _Source(raises=raised)
    runner = _runner()
    runner.offer(_turn(source, 0))
    assert runner.flush(10)
    stats = runner.stats
    assert stats.skipped == {reason: 1} and reason in SKIP_REASONS and stats.calls == {}
    assert stats.budget_used == {"calls": 0.0, "tokens": 0.0, "usd": 0.0}
    assert runner.policy.breaker.allow("model-c")
    runner.close(5)


def test_serves_full_upstream_is_busy_not_no_route() -> None:
    """``serve``'s ``UpstreamFull`` (every upstream slot taken, nothing sent) is not a routing
    problem: skipped as ``busy``, its reservation given back (it counted ``no_route``)."""
    pytest.importorskip("aiohttp")
    from handoffmon.proxy.shadow import UpstreamFull

    source = _Source(raises=UpstreamFull("no upstream slot free for a shadow call"))
    runner = _runner()
    runner.offer(_turn(source, 0))
    assert runner.flush(10)
    stats = runner.stats
    assert stats.skipped == {"busy": 1} and stats.calls == {}
    assert stats.budget_used == {"calls": 0.0, "tokens": 0.0, "usd": 0.0}
    runner.close(5)
