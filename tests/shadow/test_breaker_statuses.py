"""Which failed shadow calls trip the breaker: a misconfigured target (401, 403, 404) does, as
429/5xx/timeouts do; a request-specific 400 or 422 does not (through the real ``ShadowRunner``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
import pytest

pytest.importorskip("openai")

import openai

from handoffmon.config import config_from_mapping
from handoffmon.runtime.shadow import ShadowRunner
from handoffmon.shadow import Breaker, Budget, ShadowPolicy
from handoffmon.shadow.turns import ShadowOffer, ShadowReply, ShadowTurn

HISTORY = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]


class Failing:
    """A source whose every call raises the OpenAI SDK's error for ``status``."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.calls = 0

    def call(self, target: str, messages: list[Any], *, max_tokens: int, timeout_s: float) -> ShadowReply:
        self.calls += 1
        response = httpx.Response(
            self.status, request=httpx.Request("POST", "http://llm/v1/chat/completions")
        )
        raise openai.OpenAI(api_key="k", base_url="http://llm/v1")._make_status_error(
            f"status {self.status}", body=None, response=response
        )

    def candidates(self, model: str) -> Sequence[str]:
        return ()

    def prices(self, model: str) -> tuple[float, float] | None:
        return None


def _runner(now: list[float]) -> ShadowRunner:
    config = config_from_mapping(
        {
            "shadow": {
                "enabled": True,
                "sample_rate": 1.0,
                "targets": ["model-c"],
                "arms": ["handoff"],
                "breaker_failures": 2,
                "breaker_cooldown_s": 60,
                "usd_per_day": None,  # the source has no prices
            }
        }
    ).shadow
    policy = ShadowPolicy(config, Budget(config), Breaker(2, 60, clock=lambda: now[0]))
    return ShadowRunner(config, policy=policy)


def _offer(runner: ShadowRunner, source: Failing, conversation: str) -> None:
    """One handoff turn (model-c's history served by model-b), its shadow call finished."""
    runner.offer(
        ShadowTurn(ShadowOffer(source, HISTORY), conversation, "model-c", "model-b", (), lambda _t: ())
    )
    assert runner.flush(10)


@pytest.mark.parametrize("status", [401, 403, 404])
def test_a_misconfigured_target_trips_the_breaker_and_a_probe_it_fails_reopens_it(status: int) -> None:
    """A wrong key, a forbidden model or a wrong model name do not heal by themselves: counted as
    ``misconfigured``, they open the breaker like 5xx do, and the half-open probe answering the same
    reopens it for another cooldown. They counted as ``error``, recorded as the breaker's success:
    the target was called on every sampled turn for ever."""
    now = [0.0]
    runner = _runner(now)
    source = Failing(status)
    try:
        for i in range(5):
            _offer(runner, source, f"conv-{i}")
        assert source.calls == 2
        stats = runner.stats
        assert stats.calls == {("handoff", "misconfigured"): 2}
        assert stats.skipped == {"breaker_open": 3}
        assert stats.breaker_open == {"model-c": 1}
        now[0] = 61.0  # cooled down: one probe, which fails the same way
        _offer(runner, source, "conv-probe")
        _offer(runner, source, "conv-after")
        assert source.calls == 3
        assert runner.stats.calls == {("handoff", "misconfigured"): 3}
        assert runner.stats.skipped == {"breaker_open": 4}
        assert runner.policy.breaker.is_open("model-c")
    finally:
        runner.close(5)


@pytest.mark.parametrize("status", [400, 422])
def test_a_request_specific_error_leaves_the_breaker_closed(status: int) -> None:
    """A 400 or 422 is this request's own fault (its history, its parameters), not the target's:
    counted as ``error``, every sampled turn is still called."""
    runner = _runner([0.0])
    source = Failing(status)
    try:
        for i in range(5):
            _offer(runner, source, f"conv-{i}")
        assert source.calls == 5
        assert runner.stats.calls == {("handoff", "error"): 5}
        assert runner.stats.skipped == {}
        assert not runner.policy.breaker.is_open("model-c")
    finally:
        runner.close(5)
