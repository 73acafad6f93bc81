"""wrap(openai.OpenAI / AsyncOpenAI): create() sync, async and streamed; authorship from headers."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from handoffmon.integrations.openai_client import OpenAIClientWrapper
from handoffmon.testing import RecordingExporter
from tests.integrations.openai_mock import Upstream
from tests.pipeline.helpers import make_config, monitor

CONFIG = make_config(attribution={"canonical_models": {"openai/gpt-b": "model-b"}})


def _sync_client(upstream: Upstream) -> openai.OpenAI:
    return openai.OpenAI(
        api_key="k",
        base_url="http://upstream/v1",
        http_client=httpx.Client(transport=httpx.MockTransport(upstream)),
    )


def _async_client(upstream: Upstream) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key="k",
        base_url="http://upstream/v1",
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(upstream)),
    )


async def _turn(client: Any, mode: str, messages: list[dict[str, Any]]) -> tuple[Any, str]:
    if mode == "sync":
        r = client.chat.completions.create(model="primary", messages=messages)
        return r, r.choices[0].message.content
    if mode == "async":
        r = await client.chat.completions.create(model="primary", messages=messages)
        return r, r.choices[0].message.content
    if mode == "stream":
        s = client.chat.completions.create(model="primary", messages=messages, stream=True)
        return s, "".join(c.choices[0].delta.content or "" for c in s)
    s = await client.chat.completions.create(model="primary", messages=messages, stream=True)
    return s, "".join([c.choices[0].delta.content or "" async for c in s])


@pytest.mark.parametrize("mode", ["sync", "async", "stream", "astream"])
async def test_three_turns_authorship_and_depth(mode: str) -> None:
    """Author from x-litellm-model-name (canonicalized), fallback/retry counts from headers, depth 1..3."""
    upstream = Upstream()
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        client = _async_client(upstream) if mode.startswith("a") else _sync_client(upstream)
        wrapped = OpenAIClientWrapper(client, m)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
        for i in range(3):
            response, text = await _turn(wrapped, mode, messages)
            assert text == upstream.reply_text(i + 1)
            if mode in ("sync", "async"):
                assert isinstance(response, openai.types.chat.ChatCompletion)
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "again"}]
        m.flush(10)
    recs = [r.record for r in exp.results]
    assert [r.context.depth for r in exp.results] == [1, 2, 3]
    assert [r.context.prefix_model for r in exp.results] == ["none", "model-b", "model-b"]
    assert {(r.author, r.deployment_id, r.fallbacks, r.retries) for r in recs} == {("model-b", "dep-b", 1, 2)}
    assert all(r.streamed is mode.endswith("stream") for r in recs)
    # the request reached the upstream as the application wrote it
    assert upstream.requests[0]["messages"] == [{"role": "user", "content": "hi"}]
    assert upstream.requests[0].get("stream", False) is mode.endswith("stream")


async def test_plain_openai_upstream_uses_the_response_model() -> None:
    """Without LiteLLM headers the author is the model the provider reported."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = OpenAIClientWrapper(_sync_client(Upstream(headers={})), m)
        wrapped.chat.completions.create(model="gpt-b", messages=[{"role": "user", "content": "x"}])
        m.flush(10)
    rec = exp.results[0].record
    assert (rec.author, rec.deployment_id, rec.input_tokens, rec.output_tokens) == ("gpt-b-2024", None, 7, 3)


def test_client_surface_passes_through() -> None:
    """Everything but the monitored create calls is the client's own (models, base_url, raw responses)."""
    client = _sync_client(Upstream())
    with monitor(CONFIG) as m:
        wrapped = OpenAIClientWrapper(client, m)
        assert isinstance(wrapped, OpenAIClientWrapper)
        assert wrapped.base_url == client.base_url
        assert wrapped.models is client.models
        assert wrapped.chat.completions.with_raw_response is not None


@pytest.mark.parametrize("is_async", [False, True])
async def test_the_sdk_stream_helper_is_monitored(is_async: bool) -> None:
    """``chat.completions.stream`` (the SDK's helper) makes its request through the wrapped
    ``create``: the streamed turn is recorded like ``create(stream=True)``."""
    upstream, exp = Upstream(), RecordingExporter()
    messages = [{"role": "user", "content": "hi"}]
    with monitor(CONFIG, exporters=[exp]) as m:
        if is_async:
            wrapped = OpenAIClientWrapper(_async_client(upstream), m)
            async with wrapped.chat.completions.stream(model="primary", messages=messages) as astream:
                async for _ in astream:
                    pass
                text = (await astream.get_final_completion()).choices[0].message.content
        else:
            wrapped = OpenAIClientWrapper(_sync_client(upstream), m)
            with wrapped.chat.completions.stream(model="primary", messages=messages) as stream:
                for _ in stream:
                    pass
                text = stream.get_final_completion().choices[0].message.content
        assert m.flush(10)
    assert text == upstream.reply_text(1)
    (result,) = exp.results
    assert (result.record.author, result.record.streamed, result.context.depth) == ("model-b", True, 1)
