"""Shadow continuation through a wrapped real ``litellm.Router`` (deployments answer ``mock_response``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytest.importorskip("litellm")

from handoffmon import build_runtime
from handoffmon.config import config_from_mapping
from handoffmon.counts import ShadowKey
from handoffmon.integrations import wrap
from tests.integrations.routers import ALPHA_REPLY, BACKUP_REPLY, RATE_LIMITED

RULES = [{"name": "brief", "check": "length", "params": {"unit": "words", "max": 5}}]
"""``ALPHA_REPLY`` passes, ``BACKUP_REPLY`` (8 words) fails."""

CANONICAL = {
    "dep-a": "model-a",
    "dep-b": "model-b",
    "dep-c": "model-c",
    "dep-d": "model-d",
    "dep-e": "model-e",
}


def _dep(group: str, name: str, reply: str) -> dict[str, Any]:
    return {
        "model_name": group,
        "litellm_params": {"model": f"openai/gpt-{name}", "api_key": "k", "mock_response": reply},
        "model_info": {"id": f"dep-{name}", "input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6},
    }


def _router(*extra: tuple[str, str, str]) -> Any:
    """alpha (model-c) answers "ok", backup (model-b) a long reply, primary (model-a) always
    rate-limits and falls back to backup, dead (model-d) always rate-limits; ``extra``
    deployments (group, name, reply) added."""
    from litellm import Router

    return Router(
        model_list=[
            _dep("primary", "a", RATE_LIMITED),
            _dep("backup", "b", BACKUP_REPLY),
            _dep("alpha", "c", ALPHA_REPLY),
            _dep("dead", "d", RATE_LIMITED),
            *(_dep(*e) for e in extra),
        ],
        fallbacks=[{"primary": ["backup"]}],
        num_retries=0,
    )


def _runtime(**shadow: Any) -> Any:
    config = config_from_mapping(
        {
            "rules": RULES,
            "attribution": {"canonical_models": CANONICAL},
            "telemetry": {"log_turns": False},
            "refit": {"interval_s": 0},
            "shadow": {"sample_rate": 1.0, "calls_per_minute": 1000, **shadow},
        }
    )
    return build_runtime(config, registry=None)


def _converse(client: Any, rt: Any, groups: list[str], tag: str) -> list[str]:
    """One conversation, one turn per group; flushes between turns so attribution sees each reply."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"hello {tag}"}]
    replies = []
    for i, group in enumerate(groups):
        text = str(client.completion(model=group, messages=messages).choices[0].message.content)
        replies.append(text)
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"more {i}"}]
        assert rt.flush(20)
    return replies


def _sample(rt: Any, name: str, **labels: str) -> float:
    return rt.registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
def router() -> Iterator[Any]:
    yield _router()


def test_handoff_turn_is_continued_by_the_prefix_model_and_paired(router: Any) -> None:
    """alpha (model-c) then primary, which falls back to backup (model-b): a handoff c→b. The
    shadow asks model-c to continue the same history; its "ok" passes where the served long
    reply failed, so the pair lands in prefix_only; the shadow call is no user turn."""
    with _runtime(enabled=True, targets=["model-c"], arms=["handoff"]) as rt:
        client = wrap(router, runtime=rt)
        replies = _converse(client, rt, ["alpha", "primary"], "h")
        counts = rt.snapshot()
        assert replies == [ALPHA_REPLY, BACKUP_REPLY]
        assert counts.shadow[ShadowKey("brief", "model-c", "model-b", "prefix_only")] == 1
        assert counts.shadow[ShadowKey("brief", "model-c", "model-b", "handoff_arm")] == 1
        assert sum(counts.turns.values()) == 2  # the shadow call is not a turn
        assert _sample(rt, "handoffmon_shadow_calls_total", arm="handoff", outcome="ok") == 1
        assert _sample(rt, "handoffmon_shadow_checks_total", arm="handoff", verdict="pass") == 1
        assert _sample(rt, "handoffmon_shadow_skipped_total", reason="not_eligible") == 1  # depth 1
        assert _sample(rt, "handoffmon_shadow_spend_usd_total") > 0
        assert _sample(rt, "handoffmon_shadow_budget_used", window="calls") == 1


def test_no_handoff_turn_is_continued_by_a_candidate(router: Any) -> None:
    """alpha twice (c→c): the candidate model-b continues; b fails where c passed (prefix_only, not
    the handoff arm)."""
    with _runtime(enabled=True, targets=["model-b"], candidates={"model-c": ["model-b"]}) as rt:
        client = wrap(router, runtime=rt)
        assert _converse(client, rt, ["alpha", "alpha"], "n") == [ALPHA_REPLY, ALPHA_REPLY]
        counts = rt.snapshot()
        assert counts.shadow[ShadowKey("brief", "model-c", "model-b", "prefix_only")] == 1
        assert ShadowKey("brief", "model-c", "model-b", "handoff_arm") not in counts.shadow
        assert _sample(rt, "handoffmon_shadow_calls_total", arm="no_handoff", outcome="ok") == 1


def test_dead_shadow_target_counts_errors_trips_the_breaker_and_leaves_traffic_unchanged(router: Any) -> None:
    """Every shadow call to model-d rate-limits: the first ``breaker_failures`` are counted as
    rate_limited, then the breaker stops shadow traffic; the application's replies and the
    monitor's turn counts equal a run without shadow continuation."""
    plan = ["alpha", "alpha", "alpha"]

    def run(**shadow: Any) -> tuple[list[list[str]], dict[Any, int], Any]:
        with _runtime(**shadow) as rt:
            client = wrap(router, runtime=rt)
            replies = [_converse(client, rt, plan, f"d{i}") for i in range(4)]
            return replies, dict(rt.snapshot().turns), rt

    replies, turns, rt = run(
        enabled=True, targets=["model-d"], candidates={"model-c": ["model-d"]}, breaker_failures=3
    )
    base_replies, base_turns, _ = run()
    assert replies == base_replies
    assert turns == base_turns
    assert _sample(rt, "handoffmon_shadow_calls_total", arm="no_handoff", outcome="rate_limited") == 3
    assert _sample(rt, "handoffmon_shadow_calls_total", arm="no_handoff", outcome="ok") == 0
    assert _sample(rt, "handoffmon_shadow_skipped_total", reason="breaker_open") == 8 - 3
    assert _sample(rt, "handoffmon_shadow_breaker_open", target="model-d") == 1
    assert not rt.snapshot().shadow


def test_a_failed_shadow_call_is_counted_not_logged_by_the_router(
    router: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """LiteLLM logs every failed call without fallbacks at ERROR with its debug text; for
    handoffmon's own shadow calls that is the application's log filling with noise. The shadow
    failure is counted, nothing is logged; the application's own failing call still logs."""
    import logging

    with _runtime(enabled=True, targets=["model-d"], candidates={"model-c": ["model-d"]}) as rt:
        client = wrap(router, runtime=rt)
        with caplog.at_level(logging.INFO):
            _converse(client, rt, ["alpha", "alpha"], "q")
            assert _sample(rt, "handoffmon_shadow_calls_total", arm="no_handoff", outcome="rate_limited") == 1
            noise = [
                r for r in caplog.records if r.name.startswith("LiteLLM") and r.levelno >= logging.WARNING
            ]
            assert not noise and not [r for r in caplog.records if "gpt-d" in r.getMessage()]
            with pytest.raises(Exception, match=r"(?i)rate"):
                client.completion(model="dead", messages=[{"role": "user", "content": "mine"}])
        assert [r for r in caplog.records if r.name == "LiteLLM Router" and r.levelno >= logging.ERROR]


def test_budget_exhausted_stops_shadow_calls(router: Any) -> None:
    """Six eligible turns against two calls per minute: exactly two shadow calls, four skips."""
    with _runtime(
        enabled=True, targets=["model-b"], candidates={"model-c": ["model-b"]}, calls_per_minute=2
    ) as rt:
        client = wrap(router, runtime=rt)
        for i in range(3):
            _converse(client, rt, ["alpha", "alpha", "alpha"], f"b{i}")
        assert _sample(rt, "handoffmon_shadow_calls_total", arm="no_handoff", outcome="ok") == 2
        assert _sample(rt, "handoffmon_shadow_skipped_total", reason="budget_calls") == 4
        assert rt.snapshot().shadow[ShadowKey("brief", "model-c", "model-b", "prefix_only")] == 2


def test_dry_run_makes_no_call_but_counts_what_it_would_spend(router: Any) -> None:
    with _runtime(enabled=True, dry_run=True, targets=["model-b"], candidates={"model-c": ["model-b"]}) as rt:
        client = wrap(router, runtime=rt)
        _converse(client, rt, ["alpha", "alpha"], "dry")
        assert _sample(rt, "handoffmon_shadow_calls_total", arm="no_handoff", outcome="dry_run") == 1
        assert _sample(rt, "handoffmon_shadow_calls_total", arm="no_handoff", outcome="ok") == 0
        assert _sample(rt, "handoffmon_shadow_spend_usd_total") > 0
        assert not rt.snapshot().shadow


def test_wrap_with_config_alone_runs_shadow_continuation(router: Any) -> None:
    """``wrap(router, config)`` builds the process's shared runtime with the shadow runner from
    ``shadow.enabled``; its series show in prometheus_client's global registry with the monitor's."""
    from prometheus_client import REGISTRY

    config = config_from_mapping(
        {
            "rules": RULES,
            "attribution": {"canonical_models": CANONICAL},
            "telemetry": {"log_turns": False},
            "refit": {"interval_s": 0},
            "shadow": {"enabled": True, "sample_rate": 1.0, "targets": ["model-c"]},
        }
    )
    client = wrap(router, config)
    rt = client.runtime
    try:
        assert rt.shadow is not None
        _converse(client, rt, ["alpha", "primary"], "w")
        ok = {"arm": "handoff", "outcome": "ok"}
        assert REGISTRY.get_sample_value("handoffmon_shadow_calls_total", ok) == 1
        assert sum(rt.snapshot().turns.values()) == 2
    finally:
        rt.close()


def test_shadow_calls_run_on_handoffmon_threads_without_fallbacks_never_on_the_callers(router: Any) -> None:
    """Every call the Router sees is recorded with its thread: the application's on the caller's
    thread, the shadow call (marked by its metadata) on a handoffmon-shadow thread, with
    fallbacks and retries off and max_tokens set."""
    import threading

    seen: list[tuple[str, dict[str, Any]]] = []
    inner = router.completion

    def completion(*args: Any, **kwargs: Any) -> Any:
        seen.append((threading.current_thread().name, kwargs))
        return inner(*args, **kwargs)

    router.completion = completion
    with _runtime(enabled=True, targets=["model-c"], max_output_tokens=77) as rt:
        client = wrap(router, runtime=rt)
        _converse(client, rt, ["alpha", "primary"], "t")
    caller = threading.current_thread().name
    shadow = [(t, kw) for t, kw in seen if (kw.get("metadata") or {}).get("handoffmon_shadow")]
    served = [(t, kw) for t, kw in seen if not (kw.get("metadata") or {}).get("handoffmon_shadow")]
    assert [t for t, _ in served] == [caller, caller]
    assert len(shadow) == 1
    thread, kw = shadow[0]
    assert thread.startswith("handoffmon-shadow")
    assert kw["model"] == "alpha" and kw["fallbacks"] == [] and kw["num_retries"] == 0
    assert kw["max_tokens"] == 77


def test_a_target_no_group_serves_alone_is_skipped_before_the_budget() -> None:
    """alpha mixes model-c and model-e, so no group serves only the prefix model: the handoff
    arm's call cannot be made. It is skipped as ``no_route`` — no call counted, no budget held,
    no spend — instead of reserving an hour's tokens and counting an ``error`` call."""
    mixed = _router(("alpha", "e", ALPHA_REPLY))
    with _runtime(enabled=True, targets=["model-c", "model-e"], arms=["handoff"]) as rt:
        client = wrap(mixed, runtime=rt)
        for i in range(3):
            _converse(client, rt, ["alpha", "primary"], f"r{i}")
        stats = rt.shadow.stats
        assert stats.skipped.get("no_route") == 3
        assert stats.calls == {}
        assert stats.budget_used == {"calls": 0.0, "tokens": 0.0, "usd": 0.0}
        assert _sample(rt, "handoffmon_shadow_skipped_total", reason="no_route") == 3


def test_a_route_gone_between_decision_and_call_gives_the_budget_back(router: Any) -> None:
    """The target was routable when decided, and its group is gone when the shadow thread calls:
    nothing is sent, so it is skipped as ``no_route`` and its reservation (call, tokens, money)
    and the breaker's probe are given back."""
    from handoffmon.attribution import ModelNames
    from handoffmon.integrations.router_shadow import RouterShadow
    from handoffmon.runtime.shadow import ShadowRunner
    from handoffmon.shadow.turns import ShadowOffer, ShadowTurn

    config = config_from_mapping(
        {"shadow": {"enabled": True, "sample_rate": 1.0, "targets": ["model-c"], "arms": ["handoff"]}}
    ).shadow
    now = [0.0]
    source = RouterShadow(router, ModelNames(CANONICAL), clock=lambda: now[0])
    runner = ShadowRunner(config, start=False)
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]
    turn = ShadowTurn(ShadowOffer(source, history), "conv", "model-c", "model-b", (), lambda _t: ())
    runner.offer(turn)
    assert runner.stats.budget_used["calls"] == 1 and runner.stats.pending == 1
    router.set_model_list([m for m in router.model_list if m["model_name"] != "alpha"])
    now[0] = 3600.0  # the source re-reads the model list
    runner.start()
    assert runner.flush(10)
    stats = runner.stats
    assert stats.skipped == {"no_route": 1} and stats.calls == {}
    assert stats.budget_used == {"calls": 0.0, "tokens": 0.0, "usd": 0.0}
    assert runner.policy.breaker.allow("model-c")
    runner.close(5)


def test_a_failed_shadow_call_counts_what_the_budget_holds_for_it(router: Any) -> None:
    """A call sent to model-d fails (429): its use is unknown, so the tokens and spend series count
    the upper bound its reservation keeps holding in the budget, as the budget does — not 0."""
    with _runtime(enabled=True, targets=["model-d"], candidates={"model-c": ["model-d"]}) as rt:
        client = wrap(router, runtime=rt)
        _converse(client, rt, ["alpha", "alpha"], "f")
        stats = rt.shadow.stats
        assert stats.calls == {("no_handoff", "rate_limited"): 1}
        assert stats.tokens == stats.budget_used["tokens"] > 0
        assert stats.usd == pytest.approx(stats.budget_used["usd"]) and stats.usd > 0
        assert _sample(rt, "handoffmon_shadow_tokens_total") == stats.tokens
        assert _sample(rt, "handoffmon_shadow_spend_usd_total") == pytest.approx(stats.usd)
