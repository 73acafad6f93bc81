"""Risk-aware fallback order and shadow continuation inside a real LiteLLM Proxy (one subprocess).

The proxy (subprocess, mock_response deployments) starts on a SQLite file seeded with
planted counts in which handing model-c's conversations to model-b costs 35 points and to
model-d nothing; its in-process refit publishes the table, and a request for ``primary``
(which always rate-limits) must then fall back to ``backup2`` (model-d) instead of the
router's first fallback ``backup`` (model-b) — only when the history was written by model-c.

The same proxy runs shadow continuation through its own router: a handoff turn model-c →
model-d is continued by model-c (``alpha``); a model-c → model-c turn by model-e (``dead``,
which always answers 500 and whose router fallback must not be taken for a shadow call).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import yaml

from handoffmon.counts import CELL_TOTAL, CLUSTER_STATS, POOLED_RULE, CellStatKey, CheckKey, Counts, TurnKey
from handoffmon.pipeline.aggregates import Aggregates
from tests.integrations.test_litellm_proxy import MASTER_KEY, _delta, _series, running_proxy

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BACKUP = "the backup deployment answers with this long reply"
BACKUP2 = "backup two answers"
ALPHA = "ok"

CONFIG = {
    "model_list": [
        {
            "model_name": "primary",
            "litellm_params": {
                "model": "openai/gpt-a",
                "api_key": "unused",
                "mock_response": "litellm.RateLimitError",
            },
        },
        {
            "model_name": "backup",
            "litellm_params": {"model": "openai/gpt-b", "api_key": "unused", "mock_response": BACKUP},
        },
        {
            "model_name": "backup2",
            "litellm_params": {"model": "openai/gpt-d", "api_key": "unused", "mock_response": BACKUP2},
        },
        {
            "model_name": "alpha",
            "litellm_params": {"model": "openai/gpt-c", "api_key": "unused", "mock_response": ALPHA},
        },
        {
            "model_name": "dead",
            "litellm_params": {
                "model": "openai/gpt-e",
                "api_key": "unused",
                "mock_response": "litellm.InternalServerError",
            },
        },
    ],
    "router_settings": {
        # dead's fallback serves the application, never a shadow call (shadow calls run with fallbacks off)
        "fallbacks": [{"primary": ["backup", "backup2"]}, {"dead": ["backup"]}],
        "num_retries": 0,
    },
    "litellm_settings": {
        "callbacks": ["prometheus", "handoffmon.integrations.litellm_callback.handoffmon_callback"],
        "require_auth_for_metrics_endpoint": False,
    },
    "general_settings": {"master_key": "os.environ/LITELLM_MASTER_KEY"},
}
HANDOFFMON = {
    "store": {"backend": "sqlite", "path": "handoffmon.db"},
    "attribution": {
        "canonical_models": {
            "openai/gpt-b": "model-b",
            "openai/gpt-c": "model-c",
            "openai/gpt-d": "model-d",
            "openai/gpt-e": "model-e",
        }
    },
    "rules": [{"name": "brief", "check": "length", "params": {"unit": "words", "max": 5}}],
    "telemetry": {"log_turns": False, "prometheus": True},
    "refit": {"interval_s": 1},
    "routing": {"enabled": True, "mode": "enforce", "return_home": False},
    "shadow": {
        "enabled": True,
        "sample_rate": 1.0,
        "usd_per_day": None,  # the mock deployments have no price
        "targets": ["model-c", "model-e"],
        "candidates": {"model-c": ["model-e"]},
        "breaker_failures": 2,
    },
}


def _metrics(url: str) -> str:
    """The proxy's /metrics (a generous timeout: the first render is slow on a loaded machine)."""
    r = httpx.get(f"{url}/metrics", follow_redirects=True, timeout=120)
    assert r.status_code == 200, r.text[:500]
    return r.text


def planted(n: int = 400) -> Counts:
    """c→b: adherence 50% against b's 91% baseline (risk ≈ −35 pp); c→d: as d's baseline.

    Everything a file written by handoffmon holds, as if each turn were its own conversation:
    the clean same-author baseline and the per-cell depth and cluster sums, so the proxy's
    own traffic adds to consistent sums."""
    checks: dict[CheckKey, int] = {}
    turns: dict[TurnKey, int] = {}
    baseline: dict[CheckKey, int] = {}
    stats: Counter[CellStatKey] = Counter()

    def add(model: str, prefix: str, bucket: str, passes: int, fails: int, handoff: str) -> None:
        checks[CheckKey("brief", model, prefix, bucket, "pass")] = passes
        checks[CheckKey("brief", model, prefix, bucket, "fail")] = fails
        turns[TurnKey(model, prefix, bucket, handoff)] = passes + fails
        if prefix == model:  # clean: a same-author history
            baseline[CheckKey("brief", model, prefix, bucket, "pass")] = passes
            baseline[CheckKey("brief", model, prefix, bucket, "fail")] = fails
        for rule in ("brief", POOLED_RULE):
            stats[CellStatKey(rule, model, prefix, bucket, "depth")] += int(bucket) * (passes + fails)
            for stat, v in zip(CLUSTER_STATS, (passes + fails, passes, passes, passes + fails), strict=True):
                stats[CellStatKey(rule, model, prefix, CELL_TOTAL, stat)] += v

    for m in ("model-b", "model-c", "model-d"):
        add(m, "none", "1", n, n // 10, "false")
        add(m, m, "2", n, n // 10, "false")
    add("model-b", "model-c", "2", n // 2, n // 2, "true")
    add("model-d", "model-c", "2", n, n // 10, "true")
    add("model-c", "model-b", "2", n, n // 10, "true")
    add("model-c", "model-d", "2", n, n // 10, "true")
    return Counts(checks=checks, turns=turns, baseline_checks=baseline, cell_stats=dict(stats))


@pytest.fixture(scope="module")
def routed_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The proxy with routing enforced, once its refit has published the table."""
    tmp = tmp_path_factory.mktemp("routing-proxy")
    (tmp / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    (tmp / "handoffmon.yaml").write_text(yaml.safe_dump(HANDOFFMON))
    seed = Aggregates(str(tmp / "handoffmon.db"))
    seed.add_counts(planted())
    seed.close()
    with running_proxy(tmp, {"HANDOFFMON_CONFIG": str(tmp / "handoffmon.yaml")}) as url:
        client = openai.OpenAI(base_url=url, api_key=MASTER_KEY)
        # the runtime (and its periodic refit) starts with the first call the callback sees
        client.chat.completions.create(model="alpha", messages=[{"role": "user", "content": "warm up"}])
        deadline = time.monotonic() + 60
        while "handoffmon_routing_table_age_seconds " not in _metrics(url):
            assert time.monotonic() < deadline, "the proxy's refit published no routing table in 60 s"
            time.sleep(0.5)
        yield url


def _decisions(url: str) -> dict[str, float]:
    return {
        dict(k)["outcome"]: v
        for k, v in _series(_metrics(url), "handoffmon_routing_decisions_total").items()
        if dict(k)["mode"] == "enforce"
    }


def _after_alpha(client: openai.OpenAI, tag: str) -> list[dict[str, Any]]:
    """A conversation whose last reply model-c (alpha) wrote, once handoffmon has counted that turn.

    LiteLLM runs its success callbacks after the response is on its way, so a follow-up sent
    at once can race the recording of the reply it continues (one fresh-clone CI run routed
    such a follow-up as ``no_prefix``); a client that pauses like a user does not race it.
    """
    url = str(client.base_url).rstrip("/")

    def turns() -> float:
        return sum(_series(_metrics(url), "handoffmon_turns_total").values())

    before = turns()
    history: list[dict[str, Any]] = [{"role": "user", "content": f"conversation {tag}"}]
    reply = client.chat.completions.create(model="alpha", messages=history).choices[0].message.content
    assert reply == ALPHA
    deadline = time.monotonic() + 30
    while turns() < before + 1:
        assert time.monotonic() < deadline, "the alpha turn was never counted"
        time.sleep(0.05)
    return [*history, {"role": "assistant", "content": reply}, {"role": "user", "content": "and then?"}]


def test_a_model_c_history_falls_back_to_the_safer_model_d(routed_proxy: str) -> None:
    """After model-c wrote the history, the failing ``primary`` is served by backup2 (model-d), not the
    router's backup (model-b); streamed too; each counted as ``reordered``."""
    client = openai.OpenAI(base_url=routed_proxy, api_key=MASTER_KEY)
    before = _decisions(routed_proxy).get("reordered", 0.0)
    history = _after_alpha(client, "non-streamed")
    assert (
        client.chat.completions.create(model="primary", messages=history).choices[0].message.content
        == BACKUP2
    )
    history = _after_alpha(client, "streamed")
    chunks = client.chat.completions.create(model="primary", messages=history, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == BACKUP2
    assert _decisions(routed_proxy)["reordered"] - before == 2


def test_without_a_prefix_the_router_order_stands(routed_proxy: str) -> None:
    """Depth 1 (nobody wrote the history): backup (the router's first fallback) serves; ``no_prefix``."""
    client = openai.OpenAI(base_url=routed_proxy, api_key=MASTER_KEY)
    before = _decisions(routed_proxy).get("no_prefix", 0.0)
    reply = client.chat.completions.create(
        model="primary", messages=[{"role": "user", "content": "first turn"}]
    )
    assert reply.choices[0].message.content == BACKUP
    assert _decisions(routed_proxy)["no_prefix"] - before == 1


def test_the_requests_own_fallback_list_is_reordered(routed_proxy: str) -> None:
    """A request carrying client-side fallbacks (litellm's plain list) gets that list reordered."""
    client = openai.OpenAI(base_url=routed_proxy, api_key=MASTER_KEY)
    history = _after_alpha(client, "own list")
    reply = client.chat.completions.create(
        model="primary", messages=history, extra_body={"fallbacks": ["backup", "backup2"]}
    )
    assert reply.choices[0].message.content == BACKUP2


def test_a_responses_api_history_is_routed_the_same_way(routed_proxy: str) -> None:
    """``/v1/responses`` (the proxy's ``aresponses``): model-c (alpha) answers turn 1; turn 2,
    the history sent back as input items, asks ``primary``: the callback reads the history as
    chat, finds model-c's reply and reorders the fallbacks (counted ``reordered``, as for a
    chat call). LiteLLM 1.108's Responses path answers a mocked ``litellm.RateLimitError``
    with that text instead of raising it, so no fallback is taken here; the fallback itself is
    exercised through the wrapped Router's ``aresponses`` (test_router_routing.py), the call the
    proxy makes. A continuation by ``previous_response_id`` is routed from the recorded chain,
    tested through ``serve`` and the Router (``mock_response`` gives every response one id)."""
    client = openai.OpenAI(base_url=routed_proxy, api_key=MASTER_KEY)
    before = _decisions(routed_proxy)
    turns_before = sum(_series(_metrics(routed_proxy), "handoffmon_turns_total").values())
    first = client.responses.create(model="alpha", input=[{"role": "user", "content": "responses history"}])
    assert first.output_text == ALPHA
    deadline = time.monotonic() + 30
    while sum(_series(_metrics(routed_proxy), "handoffmon_turns_total").values()) < turns_before + 1:
        assert time.monotonic() < deadline, "the alpha turn was never counted"
        time.sleep(0.05)
    items: list[Any] = [
        {"role": "user", "content": "responses history"},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "and then?"},
    ]
    client.responses.create(model="primary", input=items)
    after = _decisions(routed_proxy)
    assert after["reordered"] - before.get("reordered", 0.0) == 1
    assert after.get("no_prefix", 0.0) == before.get("no_prefix", 0.0)


def test_routing_series_are_on_the_proxys_metrics(routed_proxy: str) -> None:
    """Every (mode, outcome) is exposed from the start; the table age is a fresh, non-negative number."""
    text = _metrics(routed_proxy)
    assert 'handoffmon_routing_decisions_total{mode="dry_run",outcome="stale"} 0.0' in text
    (age,) = [
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("handoffmon_routing_table_age_seconds ")
    ]
    assert 0 <= age < 60


# -- shadow continuation through the proxy's router ------------------------------------------------


def _shadow_series(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    text = _metrics(url)
    families = ("handoffmon_shadow_calls_total", "handoffmon_shadow_skipped_total", "handoffmon_turns_total")
    out = {f: _series(text, f) for f in families}
    out["pairs"] = _series(text, "handoffmon_shadow_pair_stats_total")
    out["breaker"] = _series(text, "handoffmon_shadow_breaker_open")
    out["pending"] = _series(text, "handoffmon_shadow_pending")
    return out


def _decided(series: dict[str, dict[tuple[tuple[str, str], ...], float]]) -> float:
    """Shadow decisions so far: calls made plus turns skipped."""
    return sum(series["handoffmon_shadow_calls_total"].values()) + sum(
        series["handoffmon_shadow_skipped_total"].values()
    )


def _wait_decided(url: str, n: float) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """The shadow series once ``n`` decisions were made and no call is pending (calls are background)."""
    deadline = time.monotonic() + 60
    while True:
        series = _shadow_series(url)
        if _decided(series) >= n and not series["pending"]:
            return series
        assert time.monotonic() < deadline, f"{_decided(series)} shadow decisions, waiting for {n}"
        time.sleep(0.2)


def _calls(series: dict[str, dict[tuple[tuple[str, str], ...], float]]) -> dict[tuple[str, str], float]:
    return {
        (dict(k)["arm"], dict(k)["outcome"]): v for k, v in series["handoffmon_shadow_calls_total"].items()
    }


def test_a_handoff_turn_is_continued_by_the_prefix_model_and_paired(routed_proxy: str) -> None:
    """model-c wrote the history, model-d served (routing): model-c is asked through the proxy's
    router in the background; the pair (model-c → model-d) appears on /metrics, and only the two
    served turns are counted as turns."""
    client = openai.OpenAI(base_url=routed_proxy, api_key=MASTER_KEY)
    before = _wait_decided(routed_proxy, 0)
    history = _after_alpha(client, "shadowed handoff")
    reply = client.chat.completions.create(model="primary", messages=history).choices[0].message.content
    assert reply == BACKUP2
    after = _wait_decided(routed_proxy, _decided(before) + 2)  # depth 1: not eligible; depth 2: a call
    assert _delta(_calls(after), _calls(before)) == {("handoff", "ok"): 1}
    pair = (("model", "model-d"), ("prefix_model", "model-c"), ("rule", "brief"), ("stat", "both_pass"))
    assert _delta(after["pairs"], before["pairs"]).get(pair) == 1
    turns = _delta(after["handoffmon_turns_total"], before["handoffmon_turns_total"])
    assert sum(turns.values()) == 2


def test_a_responses_api_handoff_is_continued_through_chat_completions(routed_proxy: str) -> None:
    """``/v1/responses``: model-c (alpha) then model-d (backup2) answer; the handoff turn's history,
    read as chat, is continued by model-c through the proxy's router's chat completions, and the
    pair is counted as a chat turn's would be."""
    client = openai.OpenAI(base_url=routed_proxy, api_key=MASTER_KEY)
    before = _wait_decided(routed_proxy, 0)
    items: list[Any] = [{"role": "user", "content": "responses shadow"}]
    first = client.responses.create(model="alpha", input=items)
    assert first.output_text == ALPHA
    items += [*(o.model_dump(exclude_none=True) for o in first.output), {"role": "user", "content": "next"}]
    assert client.responses.create(model="backup2", input=items).output_text == BACKUP2
    after = _wait_decided(routed_proxy, _decided(before) + 2)  # depth 1: not eligible; depth 2: a call
    assert _delta(_calls(after), _calls(before)) == {("handoff", "ok"): 1}
    pair = (("model", "model-d"), ("prefix_model", "model-c"), ("rule", "brief"), ("stat", "both_pass"))
    assert _delta(after["pairs"], before["pairs"]).get(pair) == 1


def test_a_dead_shadow_target_is_stopped_and_the_replies_are_unchanged(routed_proxy: str) -> None:
    """Four model-c turns: depths 2-4 ask model-e, whose deployment fails with 500 (its router fallback
    is not taken: fallbacks are off for shadow calls). Two failures open its breaker; the third turn is
    skipped; the application got model-c's reply every time."""
    client = openai.OpenAI(base_url=routed_proxy, api_key=MASTER_KEY)
    before = _wait_decided(routed_proxy, 0)
    history: list[dict[str, Any]] = [{"role": "user", "content": "dead target"}]
    for i in range(4):
        reply = client.chat.completions.create(model="alpha", messages=history).choices[0].message.content
        assert reply == ALPHA
        history += [{"role": "assistant", "content": reply}, {"role": "user", "content": f"again {i}"}]
        _wait_decided(routed_proxy, _decided(before) + i + 1)  # one turn's shadow call at a time
    after = _shadow_series(routed_proxy)
    assert _delta(_calls(after), _calls(before)) == {("no_handoff", "server_error"): 2}
    skipped = _delta(after["handoffmon_shadow_skipped_total"], before["handoffmon_shadow_skipped_total"])
    assert skipped == {(("reason", "not_eligible"),): 1, (("reason", "breaker_open"),): 1}
    assert after["breaker"] == {(("target", "model-e"),): 1.0}
