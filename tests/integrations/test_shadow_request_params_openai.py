"""A wrapped ``openai.OpenAI`` / ``AsyncOpenAI`` client: a shadow call repeats the served chat
call's generation parameters.

A rule those parameters act on (JSON format through ``response_format``) otherwise compares a
served reply made with them to a shadow reply made without: a biased switch cost. The endpoint
(an httpx ``MockTransport``) sees the shadow request's body: the call's ``temperature`` and
``response_format``, an output cap no larger than its ``max_tokens``, and none of its metadata,
user, streaming or extra headers; ``parse``'s pydantic ``response_format`` as the JSON schema the
SDK sends for it.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any

import httpx
import pytest

pytest.importorskip("openai")

import openai
from pydantic import BaseModel

from handoffmon.integrations import wrap
from tests.shadow.helpers import shadow_runtime

RULES = [{"name": "brief", "check": "length", "params": {"unit": "words", "max": 5}}]
JSON_FORMAT = {"type": "json_object"}
REPLY = '{"answer": "ok"}'
MESSAGE = {"role": "assistant", "content": REPLY}
SERVED: dict[str, Any] = {
    "temperature": 0.2,
    "response_format": JSON_FORMAT,
    "max_tokens": 50,
    "metadata": {"tenant": "t-1"},
    "user": "u-1",
    "extra_headers": {"x-app-secret": "s"},
}
"""What the application's calls set besides model and messages."""
LEFT_BEHIND = ("metadata", "user", "stream_options", "store")


class Answer(BaseModel):
    answer: str


class Endpoint:
    """Answers every request with ``REPLY`` as the model it asks for (SSE when streamed); keeps
    the shadow requests' bodies and headers."""

    def __init__(self) -> None:
        self.shadow: list[tuple[dict[str, Any], httpx.Headers]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if request.headers.get("x-handoffmon-shadow") == "1":
            self.shadow.append((body, request.headers))
        model = body["model"]
        if body.get("stream"):
            chunk = {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": model,
                "choices": [
                    {"index": 0, "delta": {"role": "assistant", "content": REPLY}, "finish_reason": "stop"}
                ],
            }
            sse = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=sse)
        completion = {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": REPLY}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
        }
        return httpx.Response(200, json=completion)


async def _two_turns(client: Any, method: str = "create", **call: Any) -> None:
    """Two turns asking model-c (c→c at depth 2: the candidate model-b is shadowed)."""
    with shadow_runtime(RULES, "model-b", {"model-c": ["model-b"]}) as rt:
        wrapped = wrap(client, runtime=rt)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
        for i in range(2):
            reply = getattr(wrapped.chat.completions, method)(model="model-c", messages=messages, **call)
            reply = await reply if inspect.isawaitable(reply) else reply
            if call.get("stream"):
                chunks = [c async for c in reply] if hasattr(reply, "__aiter__") else list(reply)
                assert "".join(c.choices[0].delta.content or "" for c in chunks) == REPLY
            else:
                assert reply.choices[0].message.content == REPLY
            messages += [{"role": "assistant", "content": REPLY}, {"role": "user", "content": f"more {i}"}]
            assert await asyncio.to_thread(rt.flush, 20)  # async shadow calls run on this loop
        assert rt.shadow is not None and rt.shadow.stats.calls == {("no_handoff", "ok"): 1}


def _assert_repeated(endpoint: Endpoint, response_format: Any = JSON_FORMAT) -> None:
    (body, headers), *more = endpoint.shadow
    assert not more
    assert body["model"] == "model-b"
    assert (body["temperature"], body["response_format"]) == (0.2, response_format)
    assert 0 < body["max_tokens"] <= 50  # shadow.max_output_tokens is 1,024 by default
    assert body.get("stream") in (None, False)
    assert not [k for k in LEFT_BEHIND if k in body], body
    assert "x-app-secret" not in headers


def _sync_client(endpoint: Endpoint) -> openai.OpenAI:
    http = httpx.Client(transport=httpx.MockTransport(endpoint))
    return openai.OpenAI(api_key="k", base_url="http://llm/v1", http_client=http)


def _async_client(endpoint: Endpoint) -> openai.AsyncOpenAI:
    http = httpx.AsyncClient(transport=httpx.MockTransport(endpoint))
    return openai.AsyncOpenAI(api_key="k", base_url="http://llm/v1", http_client=http)


async def test_a_sync_clients_shadow_call_repeats_the_calls_parameters() -> None:
    endpoint = Endpoint()
    await _two_turns(_sync_client(endpoint), **SERVED)
    _assert_repeated(endpoint)


async def test_an_async_clients_shadow_call_repeats_the_calls_parameters() -> None:
    endpoint = Endpoint()
    await _two_turns(_async_client(endpoint), **SERVED)
    _assert_repeated(endpoint)


@pytest.mark.parametrize("make", [_sync_client, _async_client], ids=["sync", "async"])
async def test_a_streamed_calls_shadow_call_is_not_streamed_but_repeats_its_parameters(make: Any) -> None:
    endpoint = Endpoint()
    await _two_turns(make(endpoint), stream=True, stream_options={"include_usage": True}, **SERVED)
    _assert_repeated(endpoint)


async def test_a_parse_calls_shadow_call_sends_its_pydantic_format_as_the_sdk_does() -> None:
    """``parse(response_format=Answer)``: ``create`` refuses a type, so the shadow call sends the
    strict JSON schema the SDK sent for the served call."""
    from openai.lib._parsing import type_to_response_format_param

    endpoint = Endpoint()
    served = {**SERVED, "response_format": Answer}
    await _two_turns(_sync_client(endpoint), "parse", **served)
    _assert_repeated(endpoint, type_to_response_format_param(Answer))


async def test_a_raw_response_views_shadow_call_repeats_the_calls_parameters() -> None:
    """Through ``with_streaming_response`` (``sdk_views``: the call begun and finished there)."""
    endpoint = Endpoint()
    with shadow_runtime(RULES, "model-b", {"model-c": ["model-b"]}) as rt:
        wrapped = wrap(_sync_client(endpoint), runtime=rt)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
        for i in range(2):
            with wrapped.chat.completions.with_streaming_response.create(
                model="model-c", messages=messages, **SERVED
            ) as response:
                assert response.parse().choices[0].message.content == REPLY
            messages += [{"role": "assistant", "content": REPLY}, {"role": "user", "content": f"more {i}"}]
            assert rt.flush(20)
        assert rt.shadow is not None and rt.shadow.stats.calls == {("no_handoff", "ok"): 1}
    _assert_repeated(endpoint)
