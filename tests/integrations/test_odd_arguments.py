"""Arguments the SDKs accept that are not lists: ``messages`` as a generator (typed
``Iterable`` by the OpenAI and Anthropic SDKs). The wrapper reads such an iterable once into a
list both the SDK and the monitor get: the request is what the bare client sends, and the turn
is attributed from its whole history (before, the monitor saw none: every turn at depth 1)."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from handoffmon.integrations.openai_client import OpenAIClientWrapper
from handoffmon.testing import RecordingExporter
from tests.pipeline.helpers import make_config, monitor

REPLY = "hello again"


class Endpoint:
    """A chat completions endpoint keeping each request body."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(request.content)
        message = {"role": "assistant", "content": REPLY}
        doc = {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "model-g",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
        return httpx.Response(200, json=doc)


def _client(endpoint: Endpoint, is_async: bool) -> Any:
    transport = httpx.MockTransport(endpoint)
    if is_async:
        http: Any = httpx.AsyncClient(transport=transport)
        return openai.AsyncOpenAI(api_key="k", base_url="http://llm/v1", http_client=http)
    return openai.OpenAI(api_key="k", base_url="http://llm/v1", http_client=httpx.Client(transport=transport))


def _once(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    yield from items


async def _conversation(client: Any, how: str) -> None:
    """Two turns, each history passed as a generator (through ``create`` or a view)."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    for _ in range(2):
        if how == "create":
            got = client.chat.completions.create(model="model-g", messages=_once(history))
        else:
            got = client.chat.completions.with_raw_response.create(model="model-g", messages=_once(history))
        got = await got if inspect.isawaitable(got) else got
        if how != "create":
            got = got.parse()
            got = await got if inspect.isawaitable(got) else got
        history += [{"role": "assistant", "content": got.choices[0].message.content}]
        history += [{"role": "user", "content": "and?"}]


@pytest.mark.parametrize("how", ["create", "with_raw_response"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_messages_as_a_generator_are_sent_whole_and_attributed(is_async: bool, how: str) -> None:
    direct, through = Endpoint(), Endpoint()
    await _conversation(_client(direct, is_async), how)
    exp = RecordingExporter()
    with monitor(make_config(), exporters=[exp]) as m:
        await _conversation(OpenAIClientWrapper(_client(through, is_async), m), how)
        assert m.flush(10)
    assert through.bodies == direct.bodies  # the SDK got every message, as without the wrapper
    assert [len(json.loads(b)["messages"]) for b in through.bodies] == [1, 3]
    turns = [(r.context.depth, r.context.prefix_model, r.context.history_chars) for r in exp.results]
    assert turns == [(1, "none", 2), (2, "model-g", 2 + len(REPLY) + 4)]


def test_only_iterables_of_messages_are_listed() -> None:
    """A generator or a deque becomes a list; a list, a tuple, a string, a mapping, a pydantic
    model (it iterates its fields) and ``omit`` stay the objects the application passed."""
    from collections import deque

    from pydantic import BaseModel

    from handoffmon.integrations.openai_client import listed

    class Odd(BaseModel):
        role: str = "user"

    message = {"role": "user", "content": "hi"}
    for given in ((m for m in [message]), deque([message])):
        kwargs: dict[str, Any] = {"messages": given}
        listed(kwargs)
        assert kwargs["messages"] == [message]
    for kept in ([message], (message,), "hi", {"role": "user"}, Odd(), openai.omit, None, 3):
        kwargs = {"messages": kept}
        listed(kwargs)
        assert kwargs["messages"] is kept
    kwargs = {"model": "m"}
    listed(kwargs)
    assert kwargs == {"model": "m"}


async def test_arguments_the_router_and_litellm_take_by_position_are_taken_by_the_wrapper() -> None:
    """``Router.acompletion(model, messages, stream)`` names ``stream`` as its third positional
    parameter, and ``litellm.completion(model, messages, timeout, temperature, ...)`` takes
    its options by position too: the wrapper refused them (``TypeError``: too many positional
    arguments) where the router answers. Now each such call is made as the application wrote
    it and is a turn, streamed where the position says so; too many arguments still raise the
    router's own ``TypeError``."""
    import litellm

    from handoffmon.integrations.router import RouterWrapper
    from tests.integrations.routers import ALPHA_REPLY, fallback_router

    messages = [{"role": "user", "content": "positional"}]
    exp = RecordingExporter()
    with monitor(make_config(), exporters=[exp]) as m:
        router = RouterWrapper(fallback_router(), m)
        stream = await router.acompletion("alpha", messages, True)
        assert "".join([c.choices[0].delta.content or "" async for c in stream]) == ALPHA_REPLY
        reply = await router.acompletion("alpha", messages, False)
        assert reply.choices[0].message.content == ALPHA_REPLY
        llm = RouterWrapper(litellm, m)
        reply = llm.completion("openai/gpt-4o", messages, 30.0, api_key="k", mock_response="by position")
        assert reply.choices[0].message.content == "by position"
        with pytest.raises(TypeError) as unwrapped:
            await fallback_router().acompletion("alpha", messages, True, "one too many")
        with pytest.raises(TypeError) as wrapped:
            await router.acompletion("alpha", messages, True, "one too many")
        assert str(wrapped.value) == str(unwrapped.value)
        assert m.flush(10)
    assert [(r.record.author, r.record.streamed) for r in exp.results] == [
        ("openai/gpt-c", True),
        ("openai/gpt-c", False),
        ("openai/gpt-4o", False),
    ]
