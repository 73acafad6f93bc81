"""A served reply no rule judged (every check ``not_applicable``) gets no shadow call: no shadow
reply could pair with it, so the call would only spend budget. It is counted as skipped."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

pytest.importorskip("openai")

import openai

from handoffmon.integrations import wrap
from tests.shadow.helpers import shadow_runtime
from tests.shadow.test_openai_shadow import Endpoint

SHALLOW_ONLY_AT_DEPTH_9 = {
    "name": "deep_brief",
    "check": "length",
    "params": {"unit": "words", "max": 5},
    "scope": {"min_depth": 9},
}
BRIEF = {"name": "brief", "check": "length", "params": {"unit": "words", "max": 5}}


def _two_turns(rules: list[dict[str, Any]]) -> tuple[Endpoint, Any, Any]:
    """Two turns of model-c (the second eligible for the no-handoff arm, candidate model-b):
    (the endpoint, the runner's stats, its skipped series by reason)."""
    endpoint = Endpoint()
    client = openai.OpenAI(
        api_key="k",
        base_url="http://llm/v1",
        http_client=httpx.Client(transport=httpx.MockTransport(endpoint)),
    )
    with shadow_runtime(rules, "model-b", {"model-c": ["model-b"]}) as rt:
        wrapped = wrap(client, runtime=rt)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
        for i in range(2):
            wrapped.chat.completions.create(model="model-c", messages=messages)
            messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": f"more {i}"}]
            assert rt.flush(20)
        stats = rt.shadow.stats
        series = rt.registry.get_sample_value("handoffmon_shadow_skipped_total", {"reason": "no_verdict"})
    return endpoint, stats, series


def test_a_reply_every_rule_left_not_applicable_is_skipped_as_no_verdict() -> None:
    """The only rule applies from depth 9: the eligible turn is counted as ``no_verdict`` and the
    candidate model-b is never asked (a call was made, and could never pair, before)."""
    endpoint, stats, series = _two_turns([SHALLOW_ONLY_AT_DEPTH_9])
    assert [model for model, _, _ in endpoint.seen] == ["model-c", "model-c"]
    assert stats.calls == {} and stats.pairs == {}
    assert stats.skipped == {"not_eligible": 1, "no_verdict": 1}
    assert series == 1
    assert stats.budget_used["calls"] == 0


def test_a_reply_one_rule_judged_is_still_shadowed() -> None:
    """The same turns with a rule that judges them (beside the one that does not): one call."""
    endpoint, stats, series = _two_turns([SHALLOW_ONLY_AT_DEPTH_9, BRIEF])
    assert [model for model, _, _ in endpoint.seen] == ["model-c", "model-c", "model-b"]
    assert stats.calls == {("no_handoff", "ok"): 1} and stats.pairs == {"no_handoff": 1}
    assert stats.skipped == {"not_eligible": 1}
    assert not series
