"""Shadow continuation through a wrapped ``openai.OpenAI`` client (an OpenAI-compatible endpoint
faked with an httpx transport that answers as the requested model)."""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from typing import Any

import httpx
import pytest

pytest.importorskip("openai")

import openai

from handoffmon.counts import Counts, ShadowKey
from handoffmon.integrations import wrap
from tests.shadow.helpers import shadow_runtime

RULES = [{"name": "brief", "check": "length", "params": {"unit": "words", "max": 5}}]
REPLIES = {"model-c": "ok", "model-b": "the other model answers with this long reply"}


class Endpoint:
    """Answers each request as the model it asks for; keeps (model, shadow header, thread) per request."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None, str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        model = body["model"]
        self.seen.append((model, request.headers.get("x-handoffmon-shadow"), threading.current_thread().name))
        completion = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": REPLIES[model]},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
        }
        return httpx.Response(200, json=completion)


def _runtime() -> Any:
    return shadow_runtime(RULES, "model-b", {"model-c": ["model-b"]})


async def _two_turns(client: Any) -> Counts:
    """Two turns asking model-c through the wrapped client; the runtime's counts after them."""
    with _runtime() as rt:
        wrapped = wrap(client, runtime=rt)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
        for i in range(2):
            reply = wrapped.chat.completions.create(model="model-c", messages=messages)
            reply = await reply if inspect.isawaitable(reply) else reply
            assert reply.choices[0].message.content == "ok"
            messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": f"more {i}"}]
            assert await asyncio.to_thread(rt.flush, 20)  # the loop stays free: async shadow calls run on it
        counts: Counts = rt.snapshot()
        return counts


async def test_sync_client_continues_a_no_handoff_turn_with_the_candidate() -> None:
    """model-c twice: the candidate model-b is asked, on a shadow thread, with the shadow header and
    through the client itself (no third turn); its long reply fails where model-c's passed."""
    endpoint = Endpoint()
    transport = httpx.Client(transport=httpx.MockTransport(endpoint))
    counts = await _two_turns(openai.OpenAI(api_key="k", base_url="http://llm/v1", http_client=transport))
    caller = threading.current_thread().name
    assert endpoint.seen[:2] == [("model-c", None, caller), ("model-c", None, caller)]
    (shadow,) = endpoint.seen[2:]
    assert shadow[:2] == ("model-b", "1") and shadow[2] != caller
    assert counts.shadow[ShadowKey("brief", "model-c", "model-b", "prefix_only")] == 1
    assert sum(counts.turns.values()) == 2


async def test_async_client_continues_on_the_applications_event_loop() -> None:
    """AsyncOpenAI: the candidate model-b is asked through the same client, as a task on the loop the
    turn was awaited on (the client's connections live there), with the shadow header; no third turn."""
    endpoint = Endpoint()
    transport = httpx.AsyncClient(transport=httpx.MockTransport(endpoint))
    counts = await _two_turns(
        openai.AsyncOpenAI(api_key="k", base_url="http://llm/v1", http_client=transport)
    )
    caller = threading.current_thread().name
    assert endpoint.seen == [("model-c", None, caller), ("model-c", None, caller), ("model-b", "1", caller)]
    assert counts.shadow[ShadowKey("brief", "model-c", "model-b", "prefix_only")] == 1
    assert sum(counts.turns.values()) == 2


class TimedEndpoint(Endpoint):
    """Also keeps each shadow request's read timeout (what httpx waits for the reply)."""

    def __init__(self) -> None:
        super().__init__()
        self.shadow_timeouts: list[float | None] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.headers.get("x-handoffmon-shadow"):
            self.shadow_timeouts.append(request.extensions["timeout"]["read"])
        return super().__call__(request)


@pytest.mark.parametrize(
    ("timeout", "expected"),
    [
        (2.5, 2.5),  # the copy's own timeout, shorter than shadow.timeout_s (60 s)
        (httpx.Timeout(90.0, read=1.5), 1.5),  # an httpx.Timeout: its read timeout
        (300.0, 60.0),  # longer than shadow.timeout_s: the shadow budget's
        (None, 60.0),  # no timeout at all: the shadow budget's
    ],
    ids=["float", "httpx", "longer", "none"],
)
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_with_options_copys_timeout_bounds_its_shadow_calls(
    timeout: Any, expected: float, is_async: bool
) -> None:
    """Turns served through ``client.with_options(timeout=...)``: the copy's shadow call waits at
    most the smaller of ``shadow.timeout_s`` and the copy's own timeout (it waited the shadow's 60 s
    for an application that gives its calls 2.5 s)."""
    endpoint = TimedEndpoint()
    if is_async:
        client: Any = openai.AsyncOpenAI(
            api_key="k",
            base_url="http://llm/v1",
            http_client=httpx.AsyncClient(transport=httpx.MockTransport(endpoint)),
        )
    else:
        client = openai.OpenAI(
            api_key="k",
            base_url="http://llm/v1",
            http_client=httpx.Client(transport=httpx.MockTransport(endpoint)),
        )
    with _runtime() as rt:
        copy = wrap(client, runtime=rt).with_options(timeout=timeout)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
        for i in range(2):
            reply = copy.chat.completions.create(model="model-c", messages=messages)
            reply = await reply if inspect.isawaitable(reply) else reply
            messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": f"more {i}"}]
            assert await asyncio.to_thread(rt.flush, 20)
        assert rt.shadow.stats.calls == {("no_handoff", "ok"): 1}
    assert endpoint.shadow_timeouts == [expected]
