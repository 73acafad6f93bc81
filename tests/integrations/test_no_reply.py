"""A call that brings back no reply is no turn: a completion with no choice (``choices: []`` or
``null``), a stream whose first event is an error (the SDK raises before any chunk), a stream
closed before its first chunk. Recorded, each was an empty reply failing every rule and
charged to the model; ``serve`` already counts them unmonitored (``bad_reply``) instead. A
reply that is there (even a refusal without text) is still a turn. The answers without a reply
are counted in ``responses_without_reply`` (``unreadable``; the upstream's error: ``error``);
a stream the application closed unread is no answer and counts nowhere."""

from __future__ import annotations

import inspect
from collections import Counter
from typing import Any

import httpx
import openai
import pytest

from handoffmon.integrations.openai_client import OpenAIClientWrapper
from handoffmon.testing import RecordingExporter
from tests.pipeline.helpers import make_config, monitor

CONFIG = make_config(rules=[{"name": "says", "check": "length", "params": {"unit": "words", "min": 1}}])
BASE = {"id": "c", "created": 1, "model": "model-g"}
MESSAGES = [{"role": "user", "content": "hi"}]


def _completion(choices: Any) -> httpx.Response:
    return httpx.Response(200, json={**BASE, "object": "chat.completion", "choices": choices})


def _events(*lines: bytes) -> httpx.Response:
    return httpx.Response(200, content=b"".join(lines), headers={"content-type": "text/event-stream"})


CHUNK = (
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"model-g",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":"hello"}}]}\n\n'
)
COUNTED = {"empty_choices": "unreadable", "null_choices": "unreadable", "error_event_first": "error"}
ANSWERS = {
    "empty_choices": _completion([]),
    "null_choices": _completion(None),
    "error_event_first": _events(b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n'),
}


def _client(m: Any, answer: httpx.Response, is_async: bool) -> OpenAIClientWrapper:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(answer.status_code, content=answer.content, headers=answer.headers)

    transport = httpx.MockTransport(handler)
    http: Any = httpx.AsyncClient(transport=transport) if is_async else httpx.Client(transport=transport)
    kind = openai.AsyncOpenAI if is_async else openai.OpenAI
    client = kind(api_key="k", base_url="http://llm/v1", http_client=http, max_retries=0)
    return OpenAIClientWrapper(client, m)


async def _drain(stream: Any) -> None:
    if hasattr(stream, "__aiter__"):
        async for _ in stream:
            pass
    else:
        for _ in stream:
            pass


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("answer", list(ANSWERS))
async def test_a_call_without_a_reply_is_no_turn(answer: str, is_async: bool) -> None:
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        client = _client(m, ANSWERS[answer], is_async)
        stream = answer.endswith("first")
        got = client.chat.completions.create(model="model-g", messages=MESSAGES, stream=stream)
        got = await got if inspect.isawaitable(got) else got
        if stream:
            with pytest.raises(openai.APIError, match="overloaded"):
                await _drain(got)
        else:
            assert got.choices in ([], None)  # what the SDK gives, unchanged
        assert m.flush(10)
        assert m.snapshot().total_turns == 0
    assert exp.results == []
    assert exp.no_replies == Counter({COUNTED[answer]: 1})


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_stream_closed_before_its_first_chunk_is_no_turn_and_one_read_is(is_async: bool) -> None:
    """Closed unread: no turn. Closed after one chunk: the partial reply the application saw is
    the turn (as ``serve`` records a client that hung up mid-stream)."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        client = _client(m, _events(CHUNK, CHUNK, b"data: [DONE]\n\n"), is_async)
        for read in (0, 1):
            got = client.chat.completions.create(model="model-g", messages=MESSAGES, stream=True)
            stream = await got if inspect.isawaitable(got) else got
            for _ in range(read):
                chunk = await stream.__anext__() if is_async else next(stream)
                assert chunk.choices[0].delta.content == "hello"
            closed = stream.close()
            if inspect.isawaitable(closed):
                await closed
        assert m.flush(10)
    assert len(exp.results) == 1  # the partial reply, recorded (its rules judge a cut-off reply)
    assert exp.no_replies == Counter()


@pytest.mark.parametrize("call", ["completion", "acompletion", "acompletion_metadata"])
async def test_a_router_completion_without_a_choice_is_no_turn(call: str) -> None:
    """A wrapped ``litellm.Router`` whose deployment answers a response with no choice (read
    later, or on the request path when metadata is given)."""
    from litellm import ModelResponse, Router

    from handoffmon.integrations.router import RouterWrapper

    empty = ModelResponse(choices=[], model="gpt-x")
    params = {"model": "openai/gpt-x", "api_key": "k", "mock_response": empty}
    router = Router(model_list=[{"model_name": "g", "litellm_params": params}], num_retries=0)
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = RouterWrapper(router, m)
        if call == "completion":
            got = wrapped.completion(model="g", messages=MESSAGES)
        else:
            extra = {"metadata": {"tags": ["t"]}} if call.endswith("metadata") else {}
            got = await wrapped.acompletion(model="g", messages=MESSAGES, **extra)
        assert got.choices == []
        assert m.flush(10)
    assert exp.results == []
    assert exp.no_replies == Counter({"unreadable": 1})


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_router_stream_closed_before_its_first_chunk_is_no_turn(is_async: bool) -> None:
    from litellm import Router

    from handoffmon.integrations.router import RouterWrapper

    params = {"model": "openai/gpt-x", "api_key": "k", "mock_response": "hello there"}
    router = Router(model_list=[{"model_name": "g", "litellm_params": params}], num_retries=0)
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = RouterWrapper(router, m)
        if is_async:
            stream = await wrapped.acompletion(model="g", messages=MESSAGES, stream=True)
            await stream.aclose()
        else:
            stream = wrapped.completion(model="g", messages=MESSAGES, stream=True)
            stream.close()
        assert m.flush(10)
    assert exp.results == [] and exp.no_replies == Counter()
