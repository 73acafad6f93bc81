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
