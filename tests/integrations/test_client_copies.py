"""A wrapped OpenAI client's copies (``with_options``, ``copy``): their calls stay monitored, and
the shadow continuation offered for a turn made through a copy goes through that copy — its
``base_url`` and default headers — not through the client the application wrapped first (a
tenant's copy must not send another tenant's history to the first client's endpoint)."""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any

import httpx
import pytest

pytest.importorskip("openai")

import openai

from handoffmon.counts import ShadowKey
from handoffmon.integrations import wrap
from tests.shadow.helpers import shadow_runtime

RULES = [{"name": "brief", "check": "length", "params": {"unit": "words", "max": 5}}]
REPLIES = {"model-c": "ok", "model-b": "a longer continuation by the other model"}


class Endpoint:
    """Answers as the requested model; keeps (host, model, shadow header, tenant header) per request."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str | None, str | None]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        model = json.loads(request.content)["model"]
        h = request.headers
        self.seen.append((request.url.host, model, h.get("x-handoffmon-shadow"), h.get("x-tenant")))
        message = {"role": "assistant", "content": REPLIES[model]}
        doc = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
        return httpx.Response(200, json=doc)


def _client(is_async: bool, endpoint: Endpoint) -> Any:
    transport = httpx.MockTransport(endpoint)
    if is_async:
        return openai.AsyncOpenAI(
            api_key="k", base_url="http://first/v1", http_client=httpx.AsyncClient(transport=transport)
        )
    sync = httpx.Client(transport=transport)
    return openai.OpenAI(api_key="k", base_url="http://first/v1", http_client=sync)


async def _converse(client: Any, rt: Any) -> None:
    """Two turns asking model-c (the second one continues the first: shadow-eligible)."""
    history: list[dict[str, Any]] = []
    for text in ("hi", "more"):
        history.append({"role": "user", "content": text})
        got = client.chat.completions.create(model="model-c", messages=history)
        reply = (await got) if inspect.isawaitable(got) else got
        history.append({"role": "assistant", "content": reply.choices[0].message.content})
        assert history[-1]["content"] == "ok"
        assert await asyncio.to_thread(rt.flush, 20)  # an async client's shadow call runs on this loop


@pytest.mark.parametrize("how", ["with_options", "copy"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_copys_turns_are_monitored_and_shadowed_through_the_copy(is_async: bool, how: str) -> None:
    endpoint = Endpoint()
    with shadow_runtime(RULES, "model-b", {"model-c": ["model-b"]}) as rt:
        wrapped = wrap(_client(is_async, endpoint), runtime=rt)
        copied = getattr(wrapped, how)(base_url="http://second/v1", default_headers={"x-tenant": "t2"})
        await _converse(copied, rt)
        counts = rt.snapshot()
    assert sum(counts.turns.values()) == 2  # the copy's calls are turns; the shadow call is none
    assert endpoint.seen[:2] == [("second", "model-c", None, "t2")] * 2
    # the candidate continued the second turn through the copy: its host and its tenant header
    assert endpoint.seen[2:] == [("second", "model-b", "1", "t2")]
    assert counts.shadow[ShadowKey("brief", "model-c", "model-b", "prefix_only")] == 1


async def test_the_original_still_shadows_through_itself() -> None:
    """Making a copy leaves the wrapper it came from as it was."""
    endpoint = Endpoint()
    with shadow_runtime(RULES, "model-b", {"model-c": ["model-b"]}) as rt:
        wrapped = wrap(_client(False, endpoint), runtime=rt)
        wrapped.with_options(base_url="http://second/v1")
        await _converse(wrapped, rt)
    assert [s[0] for s in endpoint.seen] == ["first"] * 3
    assert endpoint.seen[2][1:3] == ("model-b", "1")
