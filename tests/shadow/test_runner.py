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


_LITELLM_CALLBACK_LISTS = (
    "callbacks", "success_callback", "failure_callback", "_async_success_callback",
    "_async_failure_callback", "input_callback", "service_callback",
)  # fmt: skip


@pytest.fixture
def router(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A fresh Router on empty LiteLLM callback lists: every Router adds its callbacks to
    LiteLLM's process-wide lists, and once the earlier test files of a worker have filled them
    (30), LiteLLM logs a WARNING on each new one, which the log assertions here would read as
    shadow noise."""
    import litellm

    for name in _LITELLM_CALLBACK_LISTS:
        monkeypatch.setattr(litellm, name, [])
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


class _Recording:
    """A litellm custom provider: records each call (thread, model, timeout, max_tokens, metadata)
    and answers "<model> says ok." after ``LATENCY`` seconds, or times out first when the call's
    ``timeout`` is shorter."""

    def __init__(self) -> None:
        from litellm import CustomLLM

        class Handler(CustomLLM):
            def completion(handler, model: str, messages: Any, *a: Any, **kw: Any) -> Any:
                return self._answer(model, kw)

        self.handler = Handler()
        self.calls: list[tuple[str, str, float | None, Any, dict[str, Any]]] = []

    def _answer(self, model: str, kw: dict[str, Any]) -> Any:
        import threading
        import time

        from litellm import ModelResponse, Timeout

        timeout = kw.get("timeout")
        timeout = float(timeout) if isinstance(timeout, (int, float, str)) else None
        meta = (kw.get("litellm_params") or {}).get("metadata") or {}
        max_tokens = (kw.get("optional_params") or {}).get("max_tokens")
        self.calls.append((threading.current_thread().name, model, timeout, max_tokens, dict(meta)))
        latency = 0.6 if model.startswith("slow") else 0.0
        if timeout is not None and timeout < latency:
            time.sleep(timeout)
            raise Timeout(message="upstream timeout", model=model, llm_provider="recording")
        time.sleep(latency)
        return ModelResponse(
            model=model,
            choices=[
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}
            ],
            usage={"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
        )

    def shadow_calls(self) -> list[tuple[str, str, float | None, Any, dict[str, Any]]]:
        return [c for c in self.calls if c[4].get("handoffmon_shadow")]


@pytest.fixture
def recording() -> Iterator[tuple[_Recording, str]]:
    from handoffmon.sim.router import register_provider, unregister_provider

    rec = _Recording()
    name = register_provider(rec.handler)  # type: ignore[arg-type]
    yield rec, name
    unregister_provider(name)


def _recorded_router(provider: str, **kw: Any) -> Any:
    """g-a: model fast-a; g-b: two deployments of slow-b (0.6 s); g-p always rate-limits; g-a and
    g-p fall back to g-b."""
    from litellm import Router

    def dep(group: str, model: str, dep_id: str) -> dict[str, Any]:
        return {
            "model_name": group,
            "litellm_params": {"model": f"{provider}/{model}", "api_key": "k"},
            "model_info": {"id": dep_id, "input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6},
        }

    return Router(
        model_list=[
            dep("g-a", "fast-a", "dep-a"),
            dep("g-b", "slow-b", "dep-b1"),
            dep("g-b", "slow-b", "dep-b2"),
            _dep("g-p", "p", RATE_LIMITED),
        ],
        fallbacks=[{"g-a": ["g-b"]}, {"g-p": ["g-b"]}],
        num_retries=0,
        **kw,
    )


def test_shadow_calls_run_on_handoffmon_threads_without_fallbacks_never_on_the_callers(
    recording: tuple[_Recording, str],
) -> None:
    """The application's calls run on the caller's thread; the shadow call (marked by its metadata)
    on a handoffmon-shadow thread, straight to a deployment of the target's group (never the
    Router's completion: no fallbacks, no retries, no cooldowns), with max_tokens and timeout set."""
    import threading

    rec, provider = recording
    router = _recorded_router(provider)
    via_router: list[dict[str, Any]] = []
    inner = router.completion

    def completion(*args: Any, **kwargs: Any) -> Any:
        via_router.append(kwargs)
        return inner(*args, **kwargs)

    router.completion = completion
    target = f"{provider}/slow-b"
    with _runtime(
        enabled=True, targets=[target], arms=["no_handoff"], max_output_tokens=77, timeout_s=5
    ) as rt:
        client = wrap(router, runtime=rt)
        _converse(client, rt, ["g-a", "g-a"], "t")
        assert rt.shadow.stats.calls == {("no_handoff", "ok"): 1}
    caller = threading.current_thread().name
    assert [c[0] for c in rec.calls if not c[4].get("handoffmon_shadow")] == [caller, caller]
    ((thread, model, timeout, max_tokens, _),) = rec.shadow_calls()
    assert thread.startswith("handoffmon-shadow") and model == "slow-b"
    assert timeout == 5 and max_tokens == 77
    assert not [kw for kw in via_router if (kw.get("metadata") or {}).get("handoffmon_shadow")]


def test_shadow_timeouts_never_cool_down_the_routers_deployments(recording: tuple[_Recording, str]) -> None:
    """allowed_fails 0: a shadow call that times out (timeout_s 0.2, slow-b answers in 0.6 s) must
    not count as a failure of g-b's deployments. Two shadow timeouts; no deployment cools down,
    and the application's own fallback to g-b is served. (Through the Router both cooled down for
    60 s and the application's request failed.)"""
    rec, provider = recording
    router = _recorded_router(provider, allowed_fails=0, cooldown_time=60)
    target = f"{provider}/slow-b"
    with _runtime(
        enabled=True, targets=[target], arms=["no_handoff"], timeout_s=0.2, breaker_failures=10
    ) as rt:
        client = wrap(router, runtime=rt)
        for i in range(2):
            _converse(client, rt, ["g-a", "g-a"], f"c{i}")
        assert rt.shadow.stats.calls == {("no_handoff", "timeout"): 2}, rt.shadow.stats
        assert len(rec.shadow_calls()) == 2
        cooling = router.cooldown_cache.get_active_cooldowns(
            model_ids=["dep-b1", "dep-b2"], parent_otel_span=None
        )
        assert cooling == []
        reply = client.completion(model="g-p", messages=[{"role": "user", "content": "mine"}])
        assert reply._hidden_params["model_id"] in ("dep-b1", "dep-b2")


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


def test_targets_naming_no_deployment_are_logged_once_at_wrap_time(
    router: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Targets are canonical names: 'gpt-b' (the provider model without its prefix, where the
    Router's author is model-b) matches nothing and would be skipped silently as not_allowed.
    Wrapping logs one warning naming it, and not the target that matches."""
    import logging

    with _runtime(enabled=True, targets=["model-c", "gpt-b"]) as rt:
        with caplog.at_level(logging.WARNING, logger="handoffmon.shadow"):
            client = wrap(router, runtime=rt)
            _converse(client, rt, ["alpha", "alpha"], "w")
        told = [r.getMessage() for r in caplog.records if "shadow.targets" in r.getMessage()]
        assert len(told) == 1
        assert "['gpt-b']" in told[0] and "model-c'" not in told[0].split("match no")[0]


def _converse_as(client: Any, rt: Any, conversation_id: str, turns: int) -> None:
    """``turns`` turns of alpha in a conversation whose id the caller sets (request metadata)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    metadata = {"conversation_id": conversation_id}
    for i in range(turns):
        reply = client.completion(model="alpha", messages=messages, metadata=metadata)
        messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                     {"role": "user", "content": f"more {i}"}]  # fmt: skip
        assert rt.flush(20)


def test_conversation_ids_chosen_offline_no_longer_take_the_shadow_budget(router: Any) -> None:
    """Audit t5 end to end: at sample_rate 0.02 a client picks, offline, 40 conversation ids whose
    depth-2 turn drew below the rate under the old public hash and sends one such turn each. Now
    they are sampled at the rate (Binomial(40, 0.02): mean 0.8; more than 6 calls has probability
    < 1e-5) and the calls-per-minute budget stays free for legitimate turns. Before the fix every
    one was sampled: 10 calls filled ``calls_per_minute`` 10 and 30 were skipped as budget_calls."""
    from tests.shadow.test_policy import _old_public_draw

    rate, ids, i = 0.02, [], 0
    while len(ids) < 40:
        if _old_public_draw(f"evil-{i}\x003") < rate:
            ids.append(f"evil-{i}")
        i += 1
    shadow = {"sample_rate": rate, "calls_per_minute": 10, "candidates": {"model-c": ["model-b"]}}
    with _runtime(enabled=True, targets=["model-b"], **shadow) as rt:
        client = wrap(router, runtime=rt)
        for cid in ids:
            _converse_as(client, rt, cid, 2)
        stats = rt.shadow.stats
        assert sum(stats.calls.values()) <= 6, stats.calls
        assert "budget_calls" not in stats.skipped
        assert stats.skipped["not_sampled"] >= 34


def test_a_conversation_is_held_to_max_calls_per_conversation(router: Any) -> None:
    """Every turn sampled, one conversation of five turns (four eligible): two shadow calls, the
    other two counted in ``handoffmon_shadow_skipped_total{reason="conversation_quota"}``; another
    conversation still gets its calls. Before the fix all four were shadowed."""
    with _runtime(enabled=True, targets=["model-b"], candidates={"model-c": ["model-b"]}) as rt:
        client = wrap(router, runtime=rt)
        _converse_as(client, rt, "chatty", 5)
        assert _sample(rt, "handoffmon_shadow_calls_total", arm="no_handoff", outcome="ok") == 2
        assert _sample(rt, "handoffmon_shadow_skipped_total", reason="conversation_quota") == 2
        _converse_as(client, rt, "another", 2)
        assert _sample(rt, "handoffmon_shadow_calls_total", arm="no_handoff", outcome="ok") == 3
