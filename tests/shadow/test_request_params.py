"""The shadow call repeats the served request's generation parameters (``SHADOW_PARAMS``).

Without them a rule those parameters act on (a JSON rule the request enforced with
``response_format``, a length rule its ``max_tokens`` held) compares a reply made with them to
one made without, with opposite signs in the two arms. ``offer_of(..., request=kwargs)`` wraps
the source so every integration's call gets them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from handoffmon.attribution import ModelNames
from handoffmon.shadow.turns import ShadowReply, WithRequestParams, offer_of, shadow_params

JSON_FORMAT = {"type": "json_object"}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
REQUEST = {
    "model": "g",
    "messages": [{"role": "user", "content": "secret"}],
    "temperature": 0.1,
    "response_format": JSON_FORMAT,
    "tools": TOOLS,
    "tool_choice": None,  # unset: not sent
    "max_tokens": 50,
    "api_key": "sk-app",
    "api_base": "http://elsewhere",
    "metadata": {"user": "u"},
    "stream": True,
    "fallbacks": ["x"],
}
HI = [{"role": "user", "content": "hi"}]


def test_only_the_generation_parameters_are_taken() -> None:
    """Credentials, endpoints, metadata, streaming, routing and tools stay behind; unset ones too."""
    params, cap = shadow_params(REQUEST)
    assert params == {"temperature": 0.1, "response_format": JSON_FORMAT}  # not tools: see SHADOW_PARAMS
    assert cap == 50
    assert shadow_params({"max_tokens": 80, "max_completion_tokens": 30})[1] == 30
    assert shadow_params({"max_tokens": True})[1] is None


class _Source:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def call(self, target: str, messages: list[Any], **kw: Any) -> ShadowReply:
        self.calls.append(kw)
        return ShadowReply("{}", target, None, None)

    def candidates(self, model: str) -> tuple[str, ...]:
        return ("b",)

    def prices(self, model: str) -> tuple[float, float] | None:
        return (1.0, 2.0)


def test_the_offer_passes_them_and_the_lower_output_cap() -> None:
    """The request's max_tokens (50) lowers the shadow's bound (1,024), never raises it; a chat
    offer without ``request`` keeps its source; a Responses/Messages offer is not wrapped."""
    source = _Source()
    offer = offer_of(source, HI, request=REQUEST)
    assert isinstance(offer.source, WithRequestParams) and "secret" not in repr(offer)
    offer.source.call("a", HI, max_tokens=1024, timeout_s=5)
    offer.source.call("a", HI, max_tokens=20, timeout_s=5)
    assert [c["max_tokens"] for c in source.calls] == [50, 20]
    assert source.calls[0]["params"] == {"temperature": 0.1, "response_format": JSON_FORMAT}
    assert (offer.source.candidates("a"), offer.source.prices("a")) == (("b",), (1.0, 2.0))
    assert offer.source.routable is None  # the source has none: every target routable
    assert offer_of(source, HI).source is source
    assert offer_of(source, HI, api=True, request=REQUEST).source is source


def test_a_router_shadow_call_repeats_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through a Router deployment: litellm gets the request's response_format and temperature
    (over the deployment's own), the deployment's key (not the request's), the lower output cap."""
    pytest.importorskip("litellm")
    import litellm
    from litellm import Router

    from handoffmon.integrations.router_shadow import RouterShadow

    seen: list[dict[str, Any]] = []
    real = litellm.completion

    def record(**kwargs: Any) -> Any:
        seen.append(dict(kwargs))
        return real(**kwargs)

    monkeypatch.setattr(litellm, "completion", record)
    model = "openai/gpt-4o-mini"
    router = Router(
        model_list=[
            {
                "model_name": "g",
                "litellm_params": {"model": model, "api_key": "k", "mock_response": "{}", "temperature": 1.0},
                "model_info": {"id": "d1"},
            }
        ]
    )
    source = offer_of(RouterShadow(router, ModelNames({})), HI, request=REQUEST).source
    assert source.call(model, HI, max_tokens=1024, timeout_s=5).text == "{}"
    (kw,) = seen
    assert (kw["response_format"], kw["temperature"], kw["max_tokens"]) == (JSON_FORMAT, 0.1, 50)
    assert (kw["api_key"], kw["stream"]) == ("k", False)
    assert "api_base" not in kw and "fallbacks" not in kw and "tools" not in kw


def test_an_openai_client_shadow_call_repeats_them() -> None:
    """Through a wrapped OpenAI client: the request's parameters in the shadow request's body."""
    pytest.importorskip("openai")
    import httpx
    import openai

    from handoffmon.integrations.openai_shadow import OpenAIShadow

    bodies: list[dict[str, Any]] = []

    def endpoint(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json=_completion("model-c"))

    client = openai.OpenAI(
        api_key="sk",
        base_url="http://t/v1",
        http_client=httpx.Client(transport=httpx.MockTransport(endpoint)),
    )
    source = offer_of(OpenAIShadow(client, ModelNames({})), HI, request=REQUEST).source
    assert source.call("model-c", HI, max_tokens=1024, timeout_s=5).text == "{}"
    (body,) = bodies
    assert (body["response_format"], body["temperature"], body["max_tokens"]) == (JSON_FORMAT, 0.1, 50)
    assert "metadata" not in body and "tools" not in body and body.get("stream") in (None, False)


def test_a_serve_shadow_call_repeats_them() -> None:
    """Through serve's upstream: the request's parameters in the posted body (``_post``: the
    coroutine ``call`` runs on the serving loop)."""
    pytest.importorskip("aiohttp")
    from handoffmon.proxy.shadow import UpstreamShadow
    from handoffmon.proxy.upstream import Slots

    posted: list[dict[str, Any]] = []

    class _Response:
        status = 200
        raw_headers = ((b"content-type", b"application/json"),)

        async def read(self) -> bytes:
            return json.dumps(_completion("model-c")).encode()

    class _Upstream:
        slots = Slots(0, 1.0)

        @contextlib.asynccontextmanager
        async def request(
            self, method: str, path: str, query: bytes, headers: Any, body: bytes
        ) -> AsyncIterator[Any]:
            posted.append(json.loads(body))
            yield _Response()

    async def run() -> ShadowReply:
        upstream: Any = _Upstream()
        source = UpstreamShadow(upstream, ModelNames({}), asyncio.get_running_loop(), [], {}, 1 << 20)
        params, cap = shadow_params(REQUEST)  # what WithRequestParams passes (its call blocks on this loop)
        return await source._post("model-c", HI, min(cap or 1024, 1024), params)

    assert asyncio.run(run()).text == "{}"
    (body,) = posted
    assert (body["response_format"], body["temperature"], body["max_tokens"]) == (JSON_FORMAT, 0.1, 50)
    assert (
        body["stream"] is False and "metadata" not in body and "api_key" not in body and "tools" not in body
    )


def _completion(model: str) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "{}"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
