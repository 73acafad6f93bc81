"""The LiteLLM Proxy callback's shadow calls repeat the served request's generation parameters.

The hooks are called in-process as the proxy calls them (``data``: the request body, its
generation parameters at the top level beside the keys the proxy adds), the proxy's router a
real ``litellm.Router`` (deployments answer ``mock_response``) in ``llm_router`` of a stand-in
``litellm.proxy.proxy_server`` module; what reaches ``litellm.completion`` is recorded."""

from __future__ import annotations

import os
import sys
import types
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytest.importorskip("litellm")

from handoffmon.counts import ShadowKey
from handoffmon.integrations.litellm_callback import HandoffmonCallback
from tests.integrations.routers import ALPHA_REPLY, BACKUP_REPLY
from tests.shadow.helpers import record_completions
from tests.shadow.test_runner import _LITELLM_CALLBACK_LISTS, _router, _runtime

JSON = {"type": "json_object"}


def _data(messages: list[dict[str, Any]], call_id: str, model: str, **params: Any) -> dict[str, Any]:
    """Request data shaped as the proxy hands it to its hooks: the body, and the proxy's own keys
    (a credential and metadata among them, which a shadow call must not repeat)."""
    return {
        "model": model,
        "messages": messages,
        **params,
        "litellm_call_id": call_id,
        "api_key": "sk-client-secret",
        "user": "end-user-1",
        "metadata": {"requester_metadata": {"tags": ["checkout"]}, "user_api_key_alias": "team-a"},
        "proxy_server_request": {"headers": {"X-Conversation-Id": "conv-shadow"}},
    }


async def _turn(cb: HandoffmonCallback, router: Any, data: dict[str, Any], stream: bool) -> str:
    """One proxy call through the hooks; the reply text the client gets."""
    await cb.async_pre_call_hook(None, None, data, "acompletion")
    body = {
        k: data[k] for k in ("model", "messages", "temperature", "response_format", "max_tokens") if k in data
    }
    if not stream:
        response = await router.acompletion(**body)
        assert await cb.async_post_call_success_hook(data, None, response) is None
        return str(response.choices[0].message.content)
    chunks = await router.acompletion(**body, stream=True)
    return "".join(
        [
            c.choices[0].delta.content or ""
            async for c in cb.async_post_call_streaming_iterator_hook(None, chunks, data)
        ]
    )


@pytest.mark.parametrize("stream", [False, True], ids=["non_streamed", "streamed"])
async def test_a_proxy_turns_shadow_call_repeats_its_generation_parameters(
    monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    """alpha (model-c), then primary with temperature 0.3, a JSON response_format and max_tokens 77,
    served by backup (model-b): the handoff turn's shadow call to model-c carries those three
    (max_tokens the smaller of 77 and shadow.max_output_tokens), and none of the proxy's keys —
    the deployment's own api_key, no user, the metadata only the shadow tag. Before, it carried
    none of them: the pair compared a JSON-mode reply with a free one."""
    import litellm

    for name in _LITELLM_CALLBACK_LISTS:
        monkeypatch.setattr(litellm, name, [])
    router = _router()
    monkeypatch.setitem(sys.modules, "litellm.proxy.proxy_server", types.SimpleNamespace(llm_router=router))
    seen = record_completions(monkeypatch)
    with _runtime(enabled=True, targets=["model-c"], arms=["handoff"]) as rt:
        cb = HandoffmonCallback(runtime=rt)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
        assert await _turn(cb, router, _data(messages, "call-1", "alpha"), stream) == ALPHA_REPLY
        assert rt.flush(20)
        messages = [
            *messages,
            {"role": "assistant", "content": ALPHA_REPLY},
            {"role": "user", "content": "more"},
        ]
        data = _data(messages, "call-2", "primary", temperature=0.3, response_format=JSON, max_tokens=77)
        assert await _turn(cb, router, data, stream) == BACKUP_REPLY
        assert rt.flush(20)
        assert rt.shadow.stats.calls == {("handoff", "ok"): 1}
        assert rt.snapshot().shadow[ShadowKey("brief", "model-c", "model-b", "prefix_only")] == 1
    (kw,) = seen  # the shadow call (the served calls go through the Router's acompletion)
    assert kw["model"] == "openai/gpt-c" and kw["messages"] == messages
    assert (kw["temperature"], kw["response_format"], kw["max_tokens"]) == (0.3, JSON, 77)
    assert kw["api_key"] == "k" and "user" not in kw and "litellm_call_id" not in kw
    metadata = kw["metadata"]  # litellm adds its own keys to the dict during the call
    assert metadata["handoffmon_shadow"] is True
    assert "requester_metadata" not in metadata and "user_api_key_alias" not in metadata
