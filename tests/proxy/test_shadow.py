"""Shadow continuation in ``handoffmon serve``: through the same upstream, off the request path.

In-process proxies (uvicorn threads) in front of the LiteLLM-like mock upstream, whose
deployments ``dep-a-1``/``dep-b-1`` are canonically ``alpha``/``beta`` here, so a shadow call
must map the canonical name back to the upstream's model (``shadow.request_models``).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from handoffmon.config import AttributionConfig, HandoffmonConfig, config_from_mapping
from handoffmon.counts import ShadowKey
from tests.proxy.conftest import Upstream, running_proxy
from tests.proxy.mock_upstream import DEAD_MODEL

AUTH = {"authorization": "Bearer sk-app", "x-mock-fallbacks": "0"}
"""The application's headers: the credential goes along with shadow calls, the steering header does not."""


def _config(upstream_url: str, **shadow: Any) -> HandoffmonConfig:
    return config_from_mapping(
        {
            "telemetry": {"log_turns": False},
            "refit": {"interval_s": 0},
            "proxy": {"upstream": upstream_url},
            "attribution": {"canonical_models": {"dep-a-1": "alpha", "dep-b-1": "beta"}},
            "rules": [{"name": "short", "check": "length", "params": {"unit": "words", "max": 200}}],
            "shadow": {
                "sample_rate": 1.0,
                "usd_per_day": None,
                "targets": ["alpha", "beta"],
                "candidates": {"alpha": ["beta"], "beta": ["alpha"]},
                "request_models": {"alpha": "model-a", "beta": "model-b"},
                "max_calls_per_conversation": 100,  # these conversations are shadowed on every turn
                **shadow,
            },
        }
    )


def _conversation(url: str, tag: str, turns: int, model: str = "auto", flush: Any = None) -> list[bytes]:
    """``turns`` turns of one conversation through the proxy; the response bodies as received."""
    bodies: list[bytes] = []
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"conversation {tag}"}]
    with httpx.Client(base_url=url, timeout=30) as client:
        for i in range(turns):
            r = client.post("/v1/chat/completions", json={"model": model, "messages": messages}, headers=AUTH)
            assert r.status_code == 200, r.text
            bodies.append(r.content)
            text = json.loads(r.content)["choices"][0]["message"]["content"]
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"turn {i}"}]
            if flush is not None:
                assert flush(20)
    return bodies


def _shadow_requests(upstream: Upstream, since: int) -> list[tuple[str, dict[str, str]]]:
    return [
        (json.loads(s.body)["model"], s.headers)
        for s in upstream.mock.seen[since:]
        if s.headers.get("x-handoffmon-shadow") == "1"
    ]


def test_shadow_pairs_recorded_and_replies_byte_identical(upstream: Upstream) -> None:
    """Five turns (alpha, alpha, beta, alpha, alpha by the mock's schedule): both arms shadow through
    the upstream under the mapped model names with the app's credential only; the four pairs are
    counted and exported; the client's bytes are those of the same conversation with shadow off."""
    with running_proxy(_config(upstream.url, enabled=False)) as off:
        plain = _conversation(off.url, "identical", 5)
    since = len(upstream.mock.seen)
    with running_proxy(_config(upstream.url, enabled=True)) as on:
        shadowed = _conversation(on.url, "identical", 5)
        assert on.runtime.flush(20)
        stats = on.runtime.shadow.stats
        counts = on.runtime.snapshot()
        metrics = httpx.get(f"{on.url}/metrics").text
    assert shadowed == plain
    calls = _shadow_requests(upstream, since)
    # depth 2 alpha→alpha: beta asked; 3 alpha→beta: alpha; 4 beta→alpha: beta; 5 alpha→alpha: beta
    assert sorted(m for m, _ in calls) == ["model-a", "model-b", "model-b", "model-b"]
    assert all(h["authorization"] == "Bearer sk-app" and "x-mock-fallbacks" not in h for _, h in calls)
    assert stats.calls == {("no_handoff", "ok"): 2, ("handoff", "ok"): 2}
    assert stats.pairs == {"no_handoff": 2, "handoff": 2}
    assert sum(counts.turns.values()) == 5  # shadow replies are never turns
    pairs = {(k.prefix_model, k.model) for k in counts.shadow if k.rule == "short"}
    assert pairs == {("alpha", "beta"), ("beta", "alpha")}
    # alpha→beta: depth 2 and 5 (no-handoff arm) and 3 (handoff arm); every reply is short
    assert counts.shadow[ShadowKey("short", "alpha", "beta", "both_pass")] == 3
    assert counts.shadow[ShadowKey("short", "beta", "alpha", "both_pass")] == 1
    assert 'handoffmon_shadow_pair_stats_total{model="beta",prefix_model="alpha",rule="short"' in metrics


def test_a_dead_shadow_target_leaves_the_traffic_unchanged(upstream: Upstream) -> None:
    """Every shadow call to a target answering 503 fails: counted, the breaker stops the target after
    two, and the application's six replies are byte for byte those of a proxy without shadow."""
    dead = {
        "enabled": True,
        "arms": ["no_handoff"],
        "targets": ["gone"],
        "candidates": {"alpha": ["gone"]},
        "request_models": {"gone": DEAD_MODEL},
        "breaker_failures": 2,
    }
    with running_proxy(_config(upstream.url, enabled=False)) as off:
        plain = _conversation(off.url, "dead", 6, model="model-a")
    since = len(upstream.mock.seen)
    with running_proxy(_config(upstream.url, **dead)) as on:
        shadowed = _conversation(on.url, "dead", 6, model="model-a", flush=on.runtime.flush)
        stats = on.runtime.shadow.stats
        metrics = httpx.get(f"{on.url}/metrics").text
    assert shadowed == plain
    assert [m for m, _ in _shadow_requests(upstream, since)] == [DEAD_MODEL, DEAD_MODEL]
    assert stats.calls == {("no_handoff", "server_error"): 2}
    assert stats.skipped == {"not_eligible": 1, "breaker_open": 3}  # turn 1 has no prefix; turns 4-6
    assert stats.breaker_open == {"gone": 1}
    assert 'handoffmon_shadow_calls_total{arm="no_handoff",outcome="server_error"} 2.0' in metrics


def test_the_budget_holds_under_more_traffic_than_it_allows(upstream: Upstream) -> None:
    """Twenty eligible turns against 3 calls per minute: exactly 3 shadow calls reach the upstream,
    the other 17 are skipped as ``budget_calls``."""
    budget = {"enabled": True, "calls_per_minute": 3, "max_output_tokens": 200}
    since = len(upstream.mock.seen)
    with running_proxy(_config(upstream.url, **budget)) as on:
        for c in range(5):
            _conversation(on.url, f"budget {c}", 5)  # 4 eligible turns each
        assert on.runtime.flush(20)
        stats = on.runtime.shadow.stats
    made = len(_shadow_requests(upstream, since))
    assert made == 3 == sum(stats.calls.values())
    assert stats.skipped == {"not_eligible": 5, "budget_calls": 20 - 3}
    assert stats.budget_used["calls"] == 3 <= stats.budget_limit["calls"]


def test_the_token_budget_is_never_exceeded(upstream: Upstream) -> None:
    """A token budget below what twenty eligible turns' shadow calls use even when each call settles
    before the next is reserved: some calls are made, the rest skipped as ``budget_tokens``, and the
    tokens the upstream reports for the calls made (and the window's settled use) stay within the
    budget, however the calls overlap."""
    # the mock reports 10 × depth + 20 tokens per call; five conversations shadow depths 2..5:
    # 1,100 tokens if every call were made. A limit above that passes only when calls overlap
    # (reservations, not use, fill it): a timing assumption, not the budget's invariant.
    limit = 900
    assert limit < 5 * sum(10 * depth + 20 for depth in range(2, 6))
    budget = {"enabled": True, "calls_per_minute": 1000, "tokens_per_hour": limit, "max_output_tokens": 200}
    since = len(upstream.mock.seen)
    with running_proxy(_config(upstream.url, **budget)) as on:
        for c in range(5):
            _conversation(on.url, f"tokens {c}", 5)
        assert on.runtime.flush(20)
        stats = on.runtime.shadow.stats
    made = _shadow_requests(upstream, since)
    assert 0 < len(made) == sum(stats.calls.values()) < 20, len(made)
    assert stats.skipped["budget_tokens"] == 20 - len(made)
    # the mock reports 10 × depth + 20 tokens per call; depth = assistant messages + 1
    reported = sum(
        10 * (sum(m["role"] == "assistant" for m in json.loads(s.body)["messages"]) + 1) + 20
        for s in upstream.mock.seen[since:]
        if s.headers.get("x-handoffmon-shadow") == "1"
    )
    assert reported == stats.tokens <= limit
    assert stats.budget_used["tokens"] <= limit


def test_the_money_budget_holds_with_cost_map_prices(upstream: Upstream) -> None:
    """Canonical names priced by litellm's cost map (gpt-4o-mini, gpt-4o) and a money cap below one
    gpt-4o call's upper bound: every gpt-4o shadow call is skipped as ``budget_money``, every
    gpt-4o-mini one is made, and the spend stays within the cap."""
    pytest.importorskip("litellm")
    cap = 0.001
    priced = {
        "enabled": True,
        "usd_per_day": cap,
        "max_output_tokens": 100,
        "targets": ["gpt-4o-mini", "gpt-4o"],
        "candidates": {"gpt-4o-mini": ["gpt-4o"], "gpt-4o": ["gpt-4o-mini"]},
        "request_models": {"gpt-4o-mini": "model-a", "gpt-4o": "model-b"},
    }
    config = _config(upstream.url, **priced).model_copy(
        update={
            "attribution": AttributionConfig(canonical_models={"dep-a-1": "gpt-4o-mini", "dep-b-1": "gpt-4o"})
        }
    )
    since = len(upstream.mock.seen)
    with running_proxy(config) as on:
        for c in range(3):
            # depth 2, 4, 5 would ask gpt-4o (mini → 4o, 4o → mini is the handoff arm asking mini at 3)
            _conversation(on.url, f"money {c}", 5)
        assert on.runtime.flush(20)
        stats = on.runtime.shadow.stats
    assert [m for m, _ in _shadow_requests(upstream, since)] == ["model-a"] * 3
    assert stats.calls == {("handoff", "ok"): 3}
    assert stats.skipped == {"not_eligible": 3, "budget_money": 9}
    assert 0 < stats.usd <= cap and stats.budget_used["usd"] <= cap


def test_dry_run_decides_and_counts_but_calls_nothing(upstream: Upstream) -> None:
    """``dry_run``: the four eligible turns are decided and counted as ``dry_run`` with their reserved
    tokens; the upstream sees no shadow request and no pair is recorded."""
    since = len(upstream.mock.seen)
    with running_proxy(_config(upstream.url, enabled=True, dry_run=True)) as on:
        _conversation(on.url, "dry run", 5)
        assert on.runtime.flush(20)
        stats = on.runtime.shadow.stats
        counts = on.runtime.snapshot()
    assert _shadow_requests(upstream, since) == []
    assert stats.calls == {("no_handoff", "dry_run"): 2, ("handoff", "dry_run"): 2}
    assert stats.tokens > 4 * 1024 and not stats.pairs and not counts.shadow


def test_per_pair_quotas_leave_room_for_other_pairs(upstream: Upstream) -> None:
    """One call per ordered pair per hour: over three conversations the pairs alpha→beta (first asked
    at depth 2: beta continues alpha's history) and beta→alpha (depth 4: beta, handoff arm) get one
    pair each; the other ten eligible turns, alpha→beta ones too, are skipped as ``quota``."""
    since = len(upstream.mock.seen)
    with running_proxy(_config(upstream.url, enabled=True, pair_calls_per_hour=1)) as on:
        for c in range(3):
            _conversation(on.url, f"quota {c}", 5)
        assert on.runtime.flush(20)
        stats = on.runtime.shadow.stats
        counts = on.runtime.snapshot()
    assert [m for m, _ in _shadow_requests(upstream, since)] == ["model-b", "model-b"]
    assert stats.skipped == {"not_eligible": 3, "quota": 12 - 2}
    assert {(k.prefix_model, k.model): v for k, v in counts.shadow.items() if k.stat == "both_pass"} == {
        ("alpha", "beta"): 1,
        ("beta", "alpha"): 1,
    }
