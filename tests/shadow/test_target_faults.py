"""Shadow targets that misbehave, through a wrapped real ``litellm.Router`` (``mock_response``):
slow, timing out, answering no reply. The application's calls and turn counts never notice, and
nothing that is not a reply forms a pair."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytest.importorskip("litellm")

from handoffmon import build_runtime
from handoffmon.config import config_from_mapping
from handoffmon.integrations import wrap
from tests.integrations.routers import ALPHA_REPLY

RULES = [{"name": "brief", "check": "length", "params": {"unit": "words", "max": 5}}]
"""An empty text passes it: a non-reply checked as "" would pair as a pass."""

TOOL_ONLY = {
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
        }
    ]
}


def _router(target: dict[str, Any]) -> Any:
    """Group ``alpha`` (dep-c, model-c) answers at once; group ``shadow`` (dep-s, model-s) is the
    shadow target, its ``litellm_params`` extended by ``target``."""
    from litellm import Router

    def dep(group: str, name: str, **extra: Any) -> dict[str, Any]:
        params = {"model": f"openai/gpt-{name}", "api_key": "k", "mock_response": ALPHA_REPLY, **extra}
        return {"model_name": group, "litellm_params": params, "model_info": {"id": f"dep-{name}"}}

    return Router(model_list=[dep("alpha", "c"), dep("shadow", "s", **target)], num_retries=0)


def _runtime(shadow: bool, **limits: Any) -> Any:
    section = {
        "enabled": shadow,
        "sample_rate": 1.0,
        "usd_per_day": None,
        "calls_per_minute": 10_000,
        "max_calls_per_conversation": 100,
        "targets": ["model-s"],
        "candidates": {"model-c": ["model-s"]},
        **limits,
    }
    config = config_from_mapping(
        {
            "rules": RULES,
            "attribution": {"canonical_models": {"dep-c": "model-c", "dep-s": "model-s"}},
            "telemetry": {"log_turns": False},
            "refit": {"interval_s": 0},
            "shadow": section,
        }
    )
    return build_runtime(config, registry=None)


def _second_turns(
    client: Any, rt: Any, conversations: int, *, wait_shadow: bool = False
) -> tuple[list[str], list[float]]:
    """``conversations`` two-turn conversations on alpha (the second turn is eligible): the replies
    and the second turns' latencies. Waits for attribution between turns, for shadow calls only
    with ``wait_shadow``."""
    replies, latencies = [], []
    for i in range(conversations):
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"hello {i}"}]
        first = str(client.completion(model="alpha", messages=messages).choices[0].message.content)
        assert rt.monitor.flush(10)
        messages += [{"role": "assistant", "content": first}, {"role": "user", "content": "more"}]
        start = time.perf_counter()
        second = client.completion(model="alpha", messages=messages)
        latencies.append(time.perf_counter() - start)
        replies += [first, str(second.choices[0].message.content)]
        assert (rt.flush if wait_shadow else rt.monitor.flush)(10)
    return replies, latencies


@pytest.fixture
def quiet_litellm(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Empty LiteLLM callback lists (as ``test_runner``'s fixture: no warning per new Router)."""
    import litellm

    for name in ("callbacks", "success_callback", "failure_callback", "_async_success_callback",
                 "_async_failure_callback", "input_callback", "service_callback"):  # fmt: skip
        monkeypatch.setattr(litellm, name, [])
    yield


def _calls(rt: Any) -> dict[str, int]:
    return {outcome: n for (_arm, outcome), n in rt.shadow.stats.calls.items()}


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")  # litellm's mock of a dict reply
@pytest.mark.parametrize("answer", [{"choices": []}, TOOL_ONLY], ids=["no_choice", "tool_calls_only"])
def test_a_target_answering_no_reply_forms_no_pair(quiet_litellm: None, answer: dict[str, Any]) -> None:
    """A served call that brings back no choice is no turn, and one that only calls tools has no
    verdicts: neither is ever offered. A shadow reply like them was checked as an empty text —
    which passes a word-count maximum — and paired, a pass charged to the target that never
    answered. It is now a failed call (``error``: the request's, not the target's), no pair."""
    router = _router({"mock_response": answer})
    with _runtime(True) as rt:
        client = wrap(router, runtime=rt)
        _second_turns(client, rt, 3)
        assert rt.flush(10)
        assert _calls(rt) == {"error": 3}
        assert not rt.snapshot().shadow
        assert not rt.shadow.stats.checks
        assert rt.shadow.stats.pairs == {}


def test_a_timing_out_target_is_counted_and_never_reaches_the_application(quiet_litellm: None) -> None:
    """litellm's mock timeout on every shadow call (one at a time): counted as ``timeout``, the
    breaker opens after ``breaker_failures``; the application's replies and turn counts equal a
    run without shadow."""
    router = _router({"mock_timeout": True})
    with _runtime(True, breaker_failures=2, timeout_s=0.2) as rt:
        replies, _ = _second_turns(wrap(router, runtime=rt), rt, 4, wait_shadow=True)
        assert rt.flush(10)
        turns, calls, skipped = dict(rt.snapshot().turns), _calls(rt), rt.shadow.stats.skipped
    with _runtime(False) as base:
        base_replies, _ = _second_turns(wrap(router, runtime=base), base, 4)
        assert base.flush(10)
        base_turns = dict(base.snapshot().turns)
    assert replies == base_replies and turns == base_turns
    assert calls == {"timeout": 2} and skipped.get("breaker_open") == 2


def test_a_slow_target_neither_slows_the_served_calls_nor_piles_up(quiet_litellm: None) -> None:
    """Every shadow call takes 0.3 s (two shadow threads, a queue of two) while twelve eligible
    turns arrive as fast as the application sends them: the served second turns are as fast as
    without shadow continuation (median within 20 ms of noise, none near the shadow's 0.3 s), the turns the
    pool cannot take are skipped ``busy`` (not queued without bound), and every call made is paired."""
    router = _router({"mock_delay": 0.3})
    with _runtime(False) as base:  # first: it also warms litellm up
        _, fast = _second_turns(wrap(router, runtime=base), base, 12)
    with _runtime(True, max_concurrency=2, queue_size=2) as rt:
        _, slow = _second_turns(wrap(router, runtime=rt), rt, 12)
        pending = rt.shadow.stats.pending
        assert rt.flush(10)
        stats = rt.shadow.stats
    assert 0 < pending <= 4
    assert statistics.median(slow) <= statistics.median(fast) + 0.02, (slow, fast)
    assert max(slow) < 0.15, slow
    made = stats.calls.get(("no_handoff", "ok"), 0)
    assert made + stats.skipped.get("busy", 0) == 12 and stats.skipped.get("busy", 0) > 0
    assert stats.pairs == {"no_handoff": made}
