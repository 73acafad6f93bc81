"""``serve`` with replies that only call tools and with refusals, JSON and streamed, through the
real OpenAI SDK."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.proxy.conftest import Proxy, proxy_config, running_proxy
from tests.proxy.scripted_upstream import Script, ScriptedUpstream, sse

RULES = [
    {"name": "short", "check": "length", "params": {"unit": "words", "max": 5}},
    {"name": "says_ok", "check": "regex_must_match", "params": {"pattern": "ok"}},
]
CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
JSON = [(b"content-type", b"application/json")]


@pytest.fixture(scope="module")
def proxy(scripted: tuple[ScriptedUpstream, str]) -> Iterator[Proxy]:
    with running_proxy(proxy_config(scripted[1], rules=RULES, pipeline={"check_budget_s": 10.0})) as p:
        yield p


def _completion(message: dict[str, Any], finish: str) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
    ).encode()


def _chunk(finish: str | None = None, **delta: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _verdicts(proxy: Proxy, rule: str) -> dict[str, float]:
    assert proxy.monitor.flush(30)
    out: dict[str, float] = {}
    for family in proxy.registry.collect():
        for s in family.samples:
            if s.name == "handoffmon_checks_total" and s.labels["rule"] == rule and s.value:
                out[s.labels["verdict"]] = out.get(s.labels["verdict"], 0.0) + s.value
    return out


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def test_tool_call_replies_are_monitored_turns_whose_rules_are_not_applicable(
    scripted: tuple[ScriptedUpstream, str], proxy: Proxy
) -> None:
    app, _ = scripted
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "find x"}]
    assert proxy.monitor.flush(30)
    before = proxy.monitor.snapshot()
    says_ok, short = _verdicts(proxy, "says_ok"), _verdicts(proxy, "short")
    # turn 1: a JSON reply that only calls a tool
    sid = app.add(
        Script(
            [_completion({"role": "assistant", "content": None, "tool_calls": [CALL]}, "tool_calls")],
            headers=JSON,
        )
    )
    got = client.chat.completions.create(model="m", messages=messages, extra_headers={"x-script": sid})
    assert (
        got.choices[0].message.tool_calls is not None and got.choices[0].message.tool_calls[0].id == "call_1"
    )
    messages += [
        got.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
    ]
    # turn 2: the same, streamed
    pieces = sse(
        _chunk(
            role="assistant",
            tool_calls=[
                {
                    "index": 0,
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": ""},
                }
            ],
        ),
        _chunk(tool_calls=[{"index": 0, "function": {"arguments": '{"q": "y"}'}}]),
        _chunk("tool_calls"),
    )
    sid = app.add(Script(pieces))
    stream = client.chat.completions.create(
        model="m", messages=messages, stream=True, extra_headers={"x-script": sid}
    )
    assert [c.choices[0].finish_reason for c in stream][-1] == "tool_calls"
    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q": "y"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_2", "content": "43"},
    ]
    # turn 3: a text reply, checked
    sid = app.add(
        Script(
            [_completion({"role": "assistant", "content": "x is 42 and y is 43, ok"}, "stop")], headers=JSON
        )
    )
    client.chat.completions.create(model="m", messages=messages, extra_headers={"x-script": sid})
    client.close()

    assert proxy.monitor.flush(30)
    snap = proxy.monitor.snapshot()
    assert snap.total_turns == before.total_turns + 3
    assert _delta(_verdicts(proxy, "says_ok"), says_ok) == {"not_applicable": 2.0, "pass": 1.0}
    assert _delta(_verdicts(proxy, "short"), short) == {"not_applicable": 2.0, "fail": 1.0}
    added = {
        k.depth_bucket: n - before.turns.get(k, 0)
        for k, n in snap.turns.items()
        if n > before.turns.get(k, 0)
    }
    assert added == {"1": 1, "2": 1, "3-4": 1}
    # the tool-call messages sent back are attributed to the model that wrote them, none unknown:
    # turn 2's history holds one assistant message, turn 3's two
    assert _delta(dict(snap.attributions), dict(before.attributions)) == {"chain": 3}


def test_a_streamed_refusal_is_checked_as_its_text(
    scripted: tuple[ScriptedUpstream, str], proxy: Proxy
) -> None:
    """Structured outputs stream a refusal in ``delta.refusal``: the SDK gets it, and the rules
    judge it (``says_ok`` passes on "ok"; an empty text would have failed it)."""
    app, _ = scripted
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0)
    before = _verdicts(proxy, "says_ok")
    pieces = sse(
        _chunk(role="assistant", content=None, refusal=""), _chunk(refusal="ok, but no"), _chunk("stop")
    )
    sid = app.add(Script(pieces))
    stream = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "do it"}],
        stream=True,
        extra_headers={"x-script": sid},
    )
    assert "".join(c.choices[0].delta.refusal or "" for c in stream) == "ok, but no"
    client.close()
    after = _verdicts(proxy, "says_ok")
    assert after.get("pass", 0.0) == before.get("pass", 0.0) + 1
    assert after.get("fail", 0.0) == before.get("fail", 0.0)
