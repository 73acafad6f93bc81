"""``ShadowRunner``: a call that was not sent is counted under the reason its ``NoRoute`` names
(``serve``'s full upstream: ``busy``)."""

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
