"""``serve``: a shadow call repeats the served chat request's generation parameters.

A rule those parameters act on (JSON format through ``response_format``) otherwise compares a
served reply made with them to a shadow reply made without: a biased switch cost. The shadow
request the LiteLLM-like mock upstream receives carries the body's ``temperature`` and
``response_format``, an output cap no larger than the body's ``max_tokens``, and none of its
metadata, user, streaming or routing fields (its credential travels as the header it came in).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.proxy.conftest import Upstream, running_proxy
from tests.proxy.test_shadow import _config

AUTH = {"authorization": "Bearer sk-app"}
JSON_FORMAT = {"type": "json_object"}
SERVED = {
    "temperature": 0.2,
    "response_format": JSON_FORMAT,
    "max_tokens": 50,
    "metadata": {"tenant": "t-1"},
    "user": "u-1",
    "fallbacks": ["model-b"],
}
"""What the application's requests set besides model and messages."""
LEFT_BEHIND = ("metadata", "user", "fallbacks", "stream_options", "api_key")


def _text(response: httpx.Response, stream: bool) -> str:
    if not stream:
        return str(json.loads(response.content)["choices"][0]["message"]["content"])
    parts = []
    for line in response.text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            for choice in json.loads(line[6:])["choices"]:
                parts.append(choice["delta"].get("content") or "")
    return "".join(parts)


def _shadow_bodies(upstream: Upstream, since: int) -> list[dict[str, Any]]:
    return [
        json.loads(s.body) for s in upstream.mock.seen[since:] if s.headers.get("x-handoffmon-shadow") == "1"
    ]


def _two_turns(upstream: Upstream, tag: str, stream: bool) -> list[dict[str, Any]]:
    """Two turns on model-a (alpha→alpha at depth 2: beta is asked); the shadow request bodies."""
    since = len(upstream.mock.seen)
    extra = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"params {tag}"}]
    config = _config(upstream.url, enabled=True)  # alpha→alpha: beta asked; max_output_tokens 1,024
    with running_proxy(config) as proxy, httpx.Client(base_url=proxy.url, timeout=30) as c:
        for i in range(2):
            body = {"model": "model-a", "messages": messages, **SERVED, **extra}
            r = c.post("/v1/chat/completions", json=body, headers=AUTH)
            assert r.status_code == 200, r.text
            messages += [
                {"role": "assistant", "content": _text(r, stream)},
                {"role": "user", "content": f"{i}"},
            ]
            assert proxy.runtime.flush(20)
        assert proxy.runtime.shadow.stats.calls == {("no_handoff", "ok"): 1}
    return _shadow_bodies(upstream, since)


def _assert_repeated(body: dict[str, Any]) -> None:
    assert body["model"] == "model-b"
    assert (body["temperature"], body["response_format"]) == (0.2, JSON_FORMAT)
    assert 0 < body["max_tokens"] <= 50
    assert body["stream"] is False
    assert not [k for k in LEFT_BEHIND if k in body], body


def test_a_shadow_call_repeats_a_json_requests_parameters(upstream: Upstream) -> None:
    """Non-streamed: the shadow body has the served body's temperature, response_format and a cap
    of at most its max_tokens (not shadow.max_output_tokens, 1,024), not its metadata or user."""
    (body,) = _two_turns(upstream, "json", stream=False)
    _assert_repeated(body)


def test_a_shadow_call_of_a_streamed_request_is_not_streamed_but_repeats_its_parameters(
    upstream: Upstream,
) -> None:
    """Streamed (``stream_options`` too): the shadow call is one JSON reply with the parameters."""
    (body,) = _two_turns(upstream, "sse", stream=True)
    _assert_repeated(body)
