"""A conversation id the application puts in an SDK client's ``default_headers`` (or a
``with_options`` copy's) reaches the upstream on every request, so ``serve`` and the LiteLLM
Proxy callback read it there; a wrapped client reads it too, with the per-call
``extra_headers`` winning as they do in the SDK, and a header the call omits
(``openai.omit``) read as absent, as the SDK sends none."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest

from handoffmon.integrations import wrap
from handoffmon.runtime import build_runtime
from handoffmon.testing import RecordingExporter
from tests.integrations.openai_mock import Upstream
from tests.pipeline.helpers import make_config

CONFIG = make_config(refit={"interval_s": 0})
HI = [{"role": "user", "content": "hi"}]


def _openai(is_async: bool, **options: Any) -> Any:
    upstream = Upstream()
    if is_async:
        return openai.AsyncOpenAI(
            api_key="k",
            base_url="http://upstream/v1",
            http_client=httpx.AsyncClient(transport=httpx.MockTransport(upstream)),
            **options,
        ), upstream
    return openai.OpenAI(
        api_key="k",
        base_url="http://upstream/v1",
        http_client=httpx.Client(transport=httpx.MockTransport(upstream)),
        **options,
    ), upstream


async def _create(client: Any, is_async: bool, **kwargs: Any) -> None:
    result = client.chat.completions.create(model="m", messages=HI, **kwargs)
    if is_async:
        await result


@pytest.mark.parametrize("is_async", [False, True])
async def test_a_wrapped_openai_client_reads_the_conversation_id_it_sends_by_default(is_async: bool) -> None:
    """default_headers, a with_options copy's, per-call extra_headers over them, omit: the ids the
    upstream received are the turns' caller conversation ids."""
    rec = RecordingExporter()
    rt = build_runtime(CONFIG, registry=None, exporters=[rec])
    try:
        raw, upstream = _openai(is_async, default_headers={"X-Conversation-Id": "conv-default"})
        client = wrap(raw, runtime=rt)
        await _create(client, is_async)
        await _create(client.with_options(default_headers={"x-litellm-session-id": "sess-opts"}), is_async)
        await _create(client, is_async, extra_headers={"x-conversation-id": "conv-call"})
        await _create(client, is_async, extra_headers={"X-Conversation-Id": openai.omit})
        plain = wrap(_openai(is_async)[0], runtime=rt)  # no default headers
        await _create(plain, is_async, extra_headers={"X-Conversation-Id": openai.omit})
        assert rt.flush(10)
    finally:
        rt.close()
    ids = [(r.context.conversation_id, r.context.conversation_id_source) for r in rec.results]
    assert ids[:3] == [("conv-default", "caller"), ("conv-default", "caller"), ("conv-call", "caller")]
    # with_options kept the X-Conversation-Id default and added a session header: the configured
    # order reads X-Conversation-Id first, as serve and the proxy callback do
    assert [source for _, source in ids[3:]] == ["derived", "derived"]  # omitted: no header went out
    assert len(upstream.requests) == 4


@pytest.mark.parametrize("metadata", [None, {"tags": "t"}])
def test_a_wrapped_clients_responses_calls_read_it_too(responses_base: str, metadata: Any) -> None:
    """A Responses call is read on the attribution thread (or, with metadata, on the request
    path): either way under the client's default conversation id."""
    rec = RecordingExporter()
    rt = build_runtime(CONFIG, registry=None, exporters=[rec])
    extra = {} if metadata is None else {"metadata": metadata}
    try:
        raw = openai.OpenAI(
            api_key="k", base_url=responses_base, default_headers={"X-Conversation-Id": "conv-resp"}
        )
        wrap(raw, runtime=rt).responses.create(model="gpt-a", input="hi", **extra)
        assert rt.flush(10)
    finally:
        rt.close()
    assert [(r.context.conversation_id, r.context.conversation_id_source) for r in rec.results] == [
        ("conv-resp", "caller")
    ]


def test_a_wrapped_anthropic_client_reads_the_conversation_id_it_sends_by_default(messages_base: str) -> None:
    """The Anthropic client's default_headers are read the same way."""
    rec = RecordingExporter()
    rt = build_runtime(CONFIG, registry=None, exporters=[rec])
    try:
        raw = anthropic.Anthropic(
            api_key="k", base_url=messages_base, default_headers={"X-Conversation-Id": "conv-claude"}
        )
        client = wrap(raw, runtime=rt)
        client.messages.create(model="claude-a", max_tokens=50, messages=HI)
        with client.messages.stream(model="claude-a", max_tokens=50, messages=HI) as stream:
            stream.get_final_message()
        assert rt.flush(10)
    finally:
        rt.close()
    assert [(r.context.conversation_id, r.context.conversation_id_source) for r in rec.results] == [
        ("conv-claude", "caller"),
        ("conv-claude", "caller"),
    ]
