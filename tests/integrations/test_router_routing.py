"""Risk-aware fallback order through a real ``litellm.Router`` over the simulated fleet."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytest.importorskip("litellm")

from handoffmon import build_runtime
from handoffmon.config import config_from_mapping
from handoffmon.integrations import wrap
from handoffmon.integrations.router_routing import fallback_groups
from handoffmon.routing import PairRisk, PairRiskTable
from handoffmon.sim.fleet import DEFAULT_RULES, Fleet, SimModel
from handoffmon.sim.provider import SimProvider
from handoffmon.sim.router import build_router, canonical_models, unregister_provider
from handoffmon.sim.rules import rule_configs


def _model(name: str, fail: float = 0.0) -> SimModel:
    base = {r.name: 0.9 for r in DEFAULT_RULES[:1]}
    return SimModel(name, f"g-{name}", base, 0.05, 0.4, 0.0, 0.0, rate_limit_rate=fail)


@pytest.fixture
def world() -> Iterator[tuple[Any, SimProvider]]:
    """Groups g-a, g-b, g-c and g-p; g-p always rate-limits and falls back to g-b, then g-c."""
    fleet = Fleet(
        models=(_model("a"), _model("b"), _model("c"), _model("p", fail=1.0)),
        rules=DEFAULT_RULES[:1],
        mu=0.0,
        fallbacks={"g-p": ("g-b", "g-c"), "g-b": ("g-c",)},
    )
    provider = SimProvider(fleet, seed=1)
    router = build_router(fleet, provider)
    yield router, provider
    unregister_provider(provider.provider_name or "")


def _runtime(router: Any, provider: SimProvider, **routing: Any) -> Any:
    fleet = provider.fleet
    config = config_from_mapping(
        {
            "rules": [r.model_dump() for r in rule_configs(fleet)],
            "attribution": {"canonical_models": canonical_models(fleet, provider.provider_name or "")},
            "telemetry": {"log_turns": False},
            "refit": {"interval_s": 0},
            "routing": {"enabled": True, **routing},
        }
    )
    return build_runtime(config, registry=None)


RISKY_B = {("a", "b"): PairRisk(-0.15, 0.01), ("a", "c"): PairRisk(0.0, 0.01)}


def _after_a(client: Any, rt: Any) -> list[dict[str, Any]]:
    """Turn 1 on g-a (author a), recorded; the history for turn 2."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "hola"}]
    r1 = client.completion(model="g-a", messages=history)
    history += [
        {"role": "assistant", "content": r1.choices[0].message.content},
        {"role": "user", "content": "y?"},
    ]
    rt.flush(10)
    return history


def _second_turn_author(
    router: Any, provider: SimProvider, table_age_s: float | None, **routing: Any
) -> tuple[str, dict[tuple[str, str], int]]:
    """Turn 1 on g-a (author a); turn 2 asks g-p, which fails: who served it, and the decision counts."""
    with _runtime(router, provider, **routing) as rt:
        if table_age_s is not None:
            rt.routing.holder.table = PairRiskTable(RISKY_B, created_at=time.time() - table_age_s)
        client = wrap(router, runtime=rt)
        history = _after_a(client, rt)
        r2 = client.completion(model="g-p", messages=history)
        counts = {k: v for k, v in rt.routing.counts.snapshot().items() if v}
        return r2._hidden_params["model_id"], counts


def test_enforce_serves_the_safer_fallback(world: tuple[Any, SimProvider]) -> None:
    """a→b is planted risky in the table: the failed g-p request is served by c, not the router's b."""
    author, counts = _second_turn_author(*world, 0.0, mode="enforce")
    assert author == "c"
    assert counts == {("enforce", "single"): 1, ("enforce", "reordered"): 1}


def test_enforce_reorders_a_per_call_plain_list(world: tuple[Any, SimProvider]) -> None:
    """The caller's own client-side list (fallbacks=["g-b", "g-c"]) is reordered the same way."""
    router, provider = world
    with _runtime(router, provider, mode="enforce") as rt:
        rt.routing.holder.table = PairRiskTable(RISKY_B, created_at=time.time())
        client = wrap(router, runtime=rt)
        history = _after_a(client, rt)
        r2 = client.completion(model="g-p", messages=history, fallbacks=["g-b", "g-c"])
        assert r2._hidden_params["model_id"] == "c"
        assert rt.routing.counts.snapshot()[("enforce", "reordered")] == 1


def test_dry_run_counts_but_keeps_the_router_order(world: tuple[Any, SimProvider]) -> None:
    """Dry run: the router's b serves, and the decision is counted as one it would have changed."""
    author, counts = _second_turn_author(*world, 0.0, mode="dry_run")
    assert author == "b"
    assert counts[("dry_run", "reordered")] == 1


@pytest.mark.parametrize(("age", "outcome"), [(None, "no_table"), (7200.0, "stale")])
def test_missing_or_stale_table_keeps_the_router_order(
    world: tuple[Any, SimProvider], age: float | None, outcome: str
) -> None:
    author, counts = _second_turn_author(*world, age, mode="enforce")
    assert author == "b"
    assert counts[("enforce", outcome)] == 1


def test_disabled_routing_adds_nothing(world: tuple[Any, SimProvider]) -> None:
    """routing.enabled false: no state on the runtime, no adapter on the wrapper."""
    router, _provider = world
    with build_runtime(config_from_mapping({"refit": {"interval_s": 0}}), registry=None) as rt:
        assert rt.routing is None
        assert wrap(router, runtime=rt)._routing is None


def test_candidates_follow_litellms_own_lookup() -> None:
    """Exact group, the generic '*' entry, a client-side plain list (tried in order for any group),
    parameter dicts (left alone) and no entry."""
    fb = [{"g-p": ["g-b", "g-c"]}, {"*": ["g-z"]}]
    assert fallback_groups(fb, "g-p") == ("g-b", "g-c")
    assert fallback_groups(fb, "other") == ("g-z",)
    assert fallback_groups(["g-b", "g-c"], "g-p") == ("g-b", "g-c")
    assert fallback_groups([{"model": "g-b", "temperature": 0.1}], "g-p") == ()
    assert fallback_groups([{"g-q": ["g-b"]}], "g-p") == ()
    assert fallback_groups(None, "g-p") == ()


def test_rewrite_keeps_every_other_groups_fallbacks(world: tuple[Any, SimProvider]) -> None:
    """The per-request list reorders only the requested group; nested hops see the router's entries."""
    router, provider = world
    with _runtime(router, provider, mode="enforce") as rt:
        rt.routing.holder.table = PairRiskTable(RISKY_B, created_at=time.time())
        client = wrap(router, runtime=rt)
        out = client._routing._rewrite(router.fallbacks, "g-p", ["g-c", "g-b"])
        assert out[0] == {"g-p": ["g-c", "g-b"]}
        assert {"g-b": ["g-c"]} in out and {"g-p": ["g-b", "g-c"]} not in out
        assert router.fallbacks == [{"g-p": ["g-b", "g-c"]}, {"g-b": ["g-c"]}]  # untouched


def test_a_failing_adapter_fails_open_and_counts(world: tuple[Any, SimProvider]) -> None:
    """A lookup that raises: the call goes through unchanged and outcome=error is counted."""
    router, provider = world
    with _runtime(router, provider, mode="enforce") as rt:
        rt.routing.holder.table = PairRiskTable(RISKY_B, created_at=time.time())
        client = wrap(router, runtime=rt)

        class Broken:
            def authors(self, *a: Any, **k: Any) -> Any:
                raise RuntimeError("lookup broke")

        client._routing._lookup = Broken()
        history = [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "y" * 40},
            {"role": "user", "content": "z"},
        ]
        reply = client.completion(model="g-p", messages=history)
        assert reply._hidden_params["model_id"] == "b"
        assert rt.routing.counts.snapshot()[("enforce", "error")] == 1


def test_proxy_body_source_is_the_bodys_then_the_keys_then_the_routers(
    world: tuple[Any, SimProvider],
) -> None:
    """apply_body (the LiteLLM Proxy hook): the body's own list wins, then the key/team
    ``router_settings_override`` fallbacks, then the router's; the body is rewritten in place."""
    router, provider = world
    with _runtime(router, provider, mode="enforce") as rt:
        rt.routing.holder.table = PairRiskTable(RISKY_B, created_at=time.time())
        client = wrap(router, runtime=rt)
        history = _after_a(client, rt)
        adapter = client._routing
        routers = {"model": "g-p", "messages": history}
        assert adapter.apply_body(routers)
        assert routers["fallbacks"][0] == {"g-p": ["g-c", "g-b"]} and {"g-b": ["g-c"]} in routers["fallbacks"]
        keys = {
            "model": "g-p",
            "messages": history,
            "router_settings_override": {"fallbacks": [{"g-p": ["g-b", "g-c"]}]},
        }
        assert adapter.apply_body(keys) and keys["fallbacks"] == [{"g-p": ["g-c", "g-b"]}]
        own = {"model": "g-p", "messages": history, "fallbacks": ["g-c", "g-b"]}
        assert not adapter.apply_body(own) and own["fallbacks"] == ["g-c", "g-b"]  # already safest: kept


# -- the Responses API (Router.aresponses; litellm 1.108's sync responses does not fall back) --------


async def _responses_second_turn(
    router: Any, provider: SimProvider, mode: str, continued: str | None
) -> tuple[str, dict[tuple[str, str], int], bool]:
    """Turn 1 on g-a by ``aresponses`` (author a); turn 2 asks g-p, which fails over: with the
    history sent back as input items (``continued=None``), or continuing a stored response by
    ``previous_response_id`` (``"first"``: turn 1's; ``"unknown"``: one never recorded).
    Who served turn 2, the decision counts, and whether the wrapped call left the caller's
    kwargs alone."""
    with _runtime(router, provider, mode=mode) as rt:
        rt.routing.holder.table = PairRiskTable(RISKY_B, created_at=time.time())
        client = wrap(router, runtime=rt)
        first: list[dict[str, Any]] = [{"role": "user", "content": "hola"}]
        r1 = await client.aresponses(model="g-a", input=first)
        assert rt.flush(10)
        if continued is None:
            kwargs: dict[str, Any] = {
                "input": [
                    *first,
                    {"role": "assistant", "content": r1.output_text},
                    {"role": "user", "content": "y?"},
                ]
            }
        else:
            previous = r1.id if continued == "first" else "resp_never_seen"
            kwargs = {"input": "y?", "previous_response_id": previous}
        sent = dict(kwargs)
        r2 = await client.aresponses(model="g-p", **kwargs)
        counts = {k: v for k, v in rt.routing.counts.snapshot().items() if v}
        return r2._hidden_params["model_id"], counts, kwargs == sent


@pytest.mark.parametrize("continued", [None, "first"])
async def test_responses_fallbacks_follow_the_risk_of_the_history(
    world: tuple[Any, SimProvider], continued: str | None
) -> None:
    """Enforce: a Responses call whose history a wrote (sent in full, or kept by the provider
    and continued by id: its authors read from the recorded response) fails over to c, not the
    router's b: the same decision as a chat call's."""
    author, counts, untouched = await _responses_second_turn(*world, "enforce", continued)
    assert author == "c"
    assert counts == {("enforce", "single"): 1, ("enforce", "reordered"): 1}
    assert untouched


async def test_responses_dry_run_and_unknown_histories_keep_the_router_order(
    world: tuple[Any, SimProvider],
) -> None:
    """Dry run counts the reorder and keeps b; a continued response never recorded here has no
    known prefix: ``no_prefix``, b serves."""
    author, counts, _ = await _responses_second_turn(*world, "dry_run", None)
    assert author == "b" and counts[("dry_run", "reordered")] == 1
    author, counts, _ = await _responses_second_turn(*world, "enforce", "unknown")
    assert author == "b" and counts[("enforce", "no_prefix")] == 1


# -- deployments named by hand, mock replies (audit repros) --------------------------------------


def _dep(group: str, model: str, reply: str, dep_id: str) -> dict[str, Any]:
    return {
        "model_name": group,
        "litellm_params": {"model": model, "api_key": "k", "mock_response": reply},
        "model_info": {"id": dep_id},
    }


def _mock_router(fallbacks: list[Any], failing: tuple[str, ...] = ("p",)) -> Any:
    """Groups g-a, g-b, g-c, g-d, g-p of deployments dep-<x> (model openai/model-<x>); the groups
    in ``failing`` always rate-limit."""
    from litellm import Router

    models = [
        _dep(
            f"g-{x}",
            f"openai/model-{x}",
            "litellm.RateLimitError" if x in failing else f"{x} says hi.",
            f"dep-{x}",
        )
        for x in "abcdp"
    ]
    return Router(model_list=models, fallbacks=fallbacks, num_retries=0)


def _mock_runtime(table: dict[tuple[str, str], PairRisk], **sections: Any) -> Any:
    config = config_from_mapping(
        {
            "rules": [{"name": "brief", "check": "length", "params": {"unit": "words", "max": 5}}],
            "telemetry": {"log_turns": False},
            "refit": {"interval_s": 0},
            "routing": {"enabled": True, "mode": "enforce", "return_home": False},
            **sections,
        }
    )
    rt = build_runtime(config, registry=None)
    rt.routing.holder.table = PairRiskTable(table, created_at=time.time())
    return rt


def test_candidates_follow_the_author_rule_for_mapped_deployment_ids() -> None:
    """``canonical_models`` keyed by deployment id (alpha, beta, gamma): attribution names the
    authors by it, so the candidates must too — beta is planted risky after alpha and the failed
    g-p request goes to gamma. (Named by the provider model string, no pair matched: b served.)"""
    router = _mock_router([{"g-p": ["g-b", "g-c"]}])
    canon = {"dep-a": "alpha", "dep-b": "beta", "dep-c": "gamma", "dep-p": "pi"}
    table = {("alpha", "beta"): PairRisk(-0.3, 0.01), ("alpha", "gamma"): PairRisk(0.0, 0.01)}
    with _mock_runtime(table, attribution={"canonical_models": canon}) as rt:
        client = wrap(router, runtime=rt)
        history = _after_a(client, rt)
        reply = client.completion(model="g-p", messages=history)
        assert reply._hidden_params["model_id"] == "dep-c"
        assert rt.routing.counts.snapshot()[("enforce", "reordered")] == 1


RISKY_MOCK_B = {
    ("openai/model-a", "openai/model-b"): PairRisk(-0.3, 0.01),
    ("openai/model-a", "openai/model-c"): PairRisk(0.0, 0.01),
}


@pytest.mark.parametrize("edit", ["in_place", "replaced"])
def test_enforce_follows_the_routers_fallbacks_when_they_change(edit: str) -> None:
    """g-p, g-b and g-c fail; the operator adds the healthy g-d to g-p's entry and a nested hop
    g-c → g-d, by editing ``router.fallbacks`` in place or assigning a new list. The next enforced
    request must use the new list (c, b reordered, d kept) and be served by d, as the plain router
    would; the old list (cached by the list's id) dropped d and the request failed."""
    router = _mock_router([{"g-p": ["g-b", "g-c"]}], failing=("p", "b", "c"))
    with _mock_runtime(RISKY_MOCK_B) as rt:
        client = wrap(router, runtime=rt)
        history = _after_a(client, rt)
        first = client._routing.apply("g-p", history, {})
        assert first is not None and first["fallbacks"] == [{"g-p": ["g-c", "g-b"]}]
        if edit == "in_place":
            router.fallbacks[0]["g-p"].append("g-d")
            router.fallbacks.append({"g-c": ["g-d"]})
        else:
            router.fallbacks = [{"g-p": ["g-b", "g-c", "g-d"]}, {"g-c": ["g-d"]}]
        second = client._routing.apply("g-p", history, {})
        assert second is not None
        assert second["fallbacks"] == [{"g-p": ["g-c", "g-b", "g-d"]}, {"g-c": ["g-d"]}]
        reply = client.completion(model="g-p", messages=history)
        assert reply._hidden_params["model_id"] == "dep-d"


def _proxy_adapter(router: Any, provider: SimProvider, rt: Any) -> tuple[Any, list[dict[str, Any]]]:
    rt.routing.holder.table = PairRiskTable(RISKY_B, created_at=time.time())
    client = wrap(router, runtime=rt)
    return client._routing, _after_a(client, rt)


def test_a_proxy_bodys_own_long_list_is_decided_quickly(world: tuple[Any, SimProvider]) -> None:
    """A LiteLLM Proxy body is the client's: a 6,000-entry ``fallbacks`` list is reordered in its
    first MAX_ORDERED entries only, every entry kept, the rest in place after them (the whole list
    was insertion-sorted on the proxy's event loop: 3.5–8.2 s measured before)."""
    from handoffmon.routing.policy import MAX_ORDERED

    router, provider = world
    with _runtime(router, provider, mode="enforce") as rt:
        adapter, history = _proxy_adapter(router, provider, rt)
        groups = ["g-b", "g-c"] * 3_000
        body = {"model": "g-p", "messages": history, "fallbacks": [{"g-p": groups}]}
        started = time.perf_counter()
        assert adapter.apply_body(body)
        assert time.perf_counter() - started < 1.0
        ordered = body["fallbacks"][0]["g-p"]
        assert ordered[:MAX_ORDERED] == ["g-c"] * (MAX_ORDERED // 2) + ["g-b"] * (MAX_ORDERED // 2)
        assert ordered[MAX_ORDERED:] == groups[MAX_ORDERED:]


def test_what_a_proxy_body_names_is_not_kept_in_the_caches(world: tuple[Any, SimProvider]) -> None:
    """Long group names and long lists from request bodies are looked up, not cached: the caches
    held up to 1,024 of each, so a client could make the proxy keep gigabytes."""
    from handoffmon.integrations.router_routing import MAX_CACHED_NAME

    router, provider = world
    with _runtime(router, provider, mode="enforce") as rt:
        adapter, history = _proxy_adapter(router, provider, rt)
        long_name = "g-" + "x" * 100_000
        for i in range(5):
            body = {"model": "g-p", "messages": history, "fallbacks": [{"g-p": [f"{long_name}{i}", "g-b"]}]}
            assert not adapter.apply_body(body)  # an unknown group is never moved, nor passed
        long_list = [{"g-p": ["g-b", "g-c"]}, *({f"g-{i}": ["g-b"]} for i in range(1000))]
        assert adapter.apply_body({"model": "g-p", "messages": history, "fallbacks": long_list})
        assert all(len(g) <= MAX_CACHED_NAME for g in adapter._groups)
        assert all(len(key[1]) <= MAX_CACHED_NAME for key in adapter._lists)


def test_tables_swapped_under_concurrent_requests_give_only_whole_decisions() -> None:
    """8 threads decide 800 requests (and make real Router calls) while the refit thread keeps
    swapping the table: b risky, c risky, stale, none, all-NaN risks, a table of 200 models none
    of them this router's. Each decision is one table's — c first (the b-risky table) or the
    router's order — none fails, each is counted once, and every real call is served."""
    import threading

    nan = float("nan")
    now = time.time()
    b_risky = PairRiskTable(RISKY_MOCK_B, created_at=now)
    c_risky = PairRiskTable(
        {
            ("openai/model-a", "openai/model-b"): PairRisk(0.0, 0.01),
            ("openai/model-a", "openai/model-c"): PairRisk(-0.3, 0.01),
        },
        created_at=now,
    )
    stale = PairRiskTable(RISKY_MOCK_B, created_at=now - 10 * 3600)
    nans = PairRiskTable({k: PairRisk(nan, nan, adherence=nan) for k in RISKY_MOCK_B}, created_at=now)
    strangers = PairRiskTable(
        {
            (f"m{i}", f"m{j}"): PairRisk(-0.1 * (i < j), 0.01)
            for i in range(200)
            for j in range(200)
            if i != j
        },
        created_at=now,
    )
    tables = [b_risky, c_risky, stale, None, nans, strangers]
    router = _mock_router([{"g-p": ["g-b", "g-c"]}])
    with _mock_runtime(RISKY_MOCK_B) as rt:
        client = wrap(router, runtime=rt)
        history = _after_a(client, rt)
        holder, done = rt.routing.holder, threading.Event()
        seen: list[Any] = []
        served: list[str] = []
        barrier = threading.Barrier(9)

        def swap() -> None:
            barrier.wait()
            i = 0
            while not done.is_set():
                holder.table = tables[i % len(tables)]
                i += 1
                time.sleep(0.0001)  # a swap every ~0.1 ms, without holding the GIL in between

        def decide() -> None:
            barrier.wait()
            for k in range(100):
                seen.append(client._routing.apply("g-p", history, {}))
                if k % 50 == 0:
                    served.append(client.completion(model="g-p", messages=history)._hidden_params["model_id"])

        swapper = threading.Thread(target=swap)
        workers = [threading.Thread(target=decide) for _ in range(8)]
        for t in [swapper, *workers]:
            t.start()
        for t in workers:
            t.join()
        done.set()
        swapper.join()
        counts = rt.routing.counts.snapshot()
    assert len(seen) == 800
    assert {None if s is None else repr(s["fallbacks"]) for s in seen} <= {
        None,
        repr([{"g-p": ["g-c", "g-b"]}]),
    }
    assert any(s is not None for s in seen) and any(s is None for s in seen)
    assert counts[("enforce", "error")] == 0
    decided = sum(n for (mode, outcome), n in counts.items() if mode == "enforce")
    assert decided == 800 + len(served) + 1  # + the real calls' own decisions, + turn 1 ("single")
    assert len(served) == 16 and set(served) <= {"dep-b", "dep-c"}


def _redis_runtime(url: str, prefix: str, timeout_s: float = 1.0) -> Any:
    return _mock_runtime(
        RISKY_MOCK_B,
        store={"backend": "redis", "url": url, "key_prefix": prefix, "timeout_s": timeout_s},
    )


@pytest.mark.integration
def test_a_replica_routes_by_the_prefix_another_replica_recorded_in_redis() -> None:
    """Two replicas on one real Redis: turn 1 served on replica 1 (author model-a), turn 2 on
    replica 2, whose g-p request fails over. Replica 2 finds the prefix model in Redis and
    enforces c before the risky b; with Redis unreachable it answers in the router's order
    (``no_prefix``) without waiting past the store's timeout per lookup."""
    import uuid

    from tests.conftest import free_port, require_redis

    require_redis()
    prefix = f"hm-test:{uuid.uuid4().hex}:"
    router = _mock_router([{"g-p": ["g-b", "g-c"]}])
    with _redis_runtime("redis://127.0.0.1:6379/0", prefix) as one:
        history = _after_a(wrap(router, runtime=one), one)
    with _redis_runtime("redis://127.0.0.1:6379/0", prefix) as two:
        reply = wrap(router, runtime=two).completion(model="g-p", messages=history)
        assert reply._hidden_params["model_id"] == "dep-c"
        assert two.routing.counts.snapshot()[("enforce", "reordered")] == 1
    with _redis_runtime(f"redis://127.0.0.1:{free_port()}/0", prefix, timeout_s=0.05) as down:
        client = wrap(router, runtime=down)
        started = time.perf_counter()
        decision = client._routing.apply("g-p", history, {})
        assert time.perf_counter() - started < 1.0
        assert decision is None
        assert client.completion(model="g-p", messages=history)._hidden_params["model_id"] == "dep-b"
        counts = down.routing.counts.snapshot()
        assert counts[("enforce", "no_prefix")] == 2 and counts[("enforce", "error")] == 0
