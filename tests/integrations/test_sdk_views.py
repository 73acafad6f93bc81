"""The SDKs' other ways to make a monitored call: ``with_raw_response`` and
``with_streaming_response`` (on the resource and on the client), ``beta.chat.completions``,
and ``with_options`` / ``copy`` (``handoffmon.integrations.sdk_views``).

LangChain's ``ChatOpenAI`` makes every call through ``with_raw_response``; before these views,
a wrapped client handed to it recorded nothing. Each test runs one conversation whose turns go
through a different path each, with the real OpenAI and Anthropic SDKs over HTTP to loopback
upstreams, and checks that every turn is recorded and attributed as ``create``'s would be
(depth, author, prefix model, every earlier reply found by its chained fingerprint), and that
the application gets the objects the SDK gives.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import httpx
import openai
import pydantic
import pytest
from openai._legacy_response import LegacyAPIResponse

from handoffmon.integrations.anthropic_client import AnthropicClientWrapper
from handoffmon.integrations.openai_client import OpenAIClientWrapper, SyncCalls
from handoffmon.testing import RecordingExporter
from tests.integrations.openai_mock import Upstream
from tests.pipeline.helpers import make_config, monitor
from tests.proxy.messages_upstream import messages_text
from tests.proxy.mock_upstream import CANONICAL_MODELS, Answer, reply_text, schedule
from tests.proxy.responses_upstream import responses_text

CONFIG = make_config(
    rules=[{"name": "no_commas", "check": "no_commas"}],
    attribution={"canonical_models": CANONICAL_MODELS},
)


async def _maybe(value: Any) -> Any:
    return await value if hasattr(value, "__await__") else value


async def _chunks_text(stream: Any) -> str:
    """The text of a chat completion chunk stream (sync or async), read to the end."""
    chunks = [c async for c in stream] if hasattr(stream, "__aiter__") else list(stream)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


async def _enter(manager: Any, use: Callable[[Any], Awaitable[str]]) -> str:
    """``use`` the response of a ``with_streaming_response`` context manager (sync or async)."""
    if hasattr(manager, "__aenter__") and not hasattr(manager, "__enter__"):
        async with manager as response:
            return await use(response)
    with manager as response:
        return await use(response)


# each way takes (wrapped client, messages, is_async) and returns the reply's text
async def _raw_create(w: Any, messages: list[Any], is_async: bool) -> str:
    raw = await _maybe(w.chat.completions.with_raw_response.create(model="gpt-x", messages=messages))
    assert isinstance(raw, LegacyAPIResponse)  # the SDK's own object, not a look-alike
    assert raw.headers["x-litellm-model-id"].startswith("dep-")
    done = raw.parse()
    assert isinstance(done, openai.types.chat.ChatCompletion) and raw.parse() is done
    return str(done.choices[0].message.content)


async def _client_raw_create(w: Any, messages: list[Any], is_async: bool) -> str:
    raw = await _maybe(w.with_raw_response.chat.completions.create(model="gpt-x", messages=messages))
    return str(raw.parse().choices[0].message.content)


async def _raw_stream(w: Any, messages: list[Any], is_async: bool) -> str:
    raw = await _maybe(
        w.chat.completions.with_raw_response.create(model="gpt-x", messages=messages, stream=True)
    )
    assert raw.headers["content-type"].startswith("text/event-stream")
    assert raw.http_response.status_code == 200  # the rest of the raw response is the SDK's
    return await _chunks_text(raw.parse())


async def _raw_parse(w: Any, messages: list[Any], is_async: bool) -> str:
    raw = await _maybe(
        w.chat.completions.with_raw_response.parse(model="gpt-x", messages=messages, response_format=Answer)
    )
    message = raw.parse().choices[0].message
    assert isinstance(message.parsed, Answer)
    return str(message.content)


async def _streaming_create(w: Any, messages: list[Any], is_async: bool) -> str:
    manager = w.chat.completions.with_streaming_response.create(model="gpt-x", messages=messages)

    async def use(response: Any) -> str:
        assert response.headers["x-litellm-model-id"].startswith("dep-")
        done = await _maybe(response.parse())
        assert (await _maybe(response.parse())) is done
        return str(done.choices[0].message.content)

    return await _enter(manager, use)


async def _client_streaming_stream(w: Any, messages: list[Any], is_async: bool) -> str:
    manager = w.with_streaming_response.chat.completions.create(model="gpt-x", messages=messages, stream=True)

    async def use(response: Any) -> str:
        return await _chunks_text(await _maybe(response.parse()))

    return await _enter(manager, use)


async def _with_options(w: Any, messages: list[Any], is_async: bool) -> str:
    copied = w.with_options(timeout=30.0)
    assert copied.monitor is w.monitor and copied.client is not w.client
    assert copied.client.timeout == 30.0
    done = await _maybe(copied.chat.completions.create(model="gpt-x", messages=messages))
    return str(done.choices[0].message.content)


async def _copy_raw(w: Any, messages: list[Any], is_async: bool) -> str:
    raw = await _maybe(
        w.copy(max_retries=1).chat.completions.with_raw_response.create(model="gpt-x", messages=messages)
    )
    return str(raw.parse().choices[0].message.content)


async def _beta_parse(w: Any, messages: list[Any], is_async: bool) -> str:
    done = await _maybe(
        w.beta.chat.completions.parse(model="gpt-x", messages=messages, response_format=Answer)
    )
    return str(done.choices[0].message.content)


async def _beta_stream(w: Any, messages: list[Any], is_async: bool) -> str:
    if is_async:
        async with w.beta.chat.completions.stream(model="gpt-x", messages=messages) as astream:
            async for _ in astream:
                pass
            done = await astream.get_final_completion()
    else:
        with w.beta.chat.completions.stream(model="gpt-x", messages=messages) as stream:
            for _ in stream:
                pass
            done = stream.get_final_completion()
    return str(done.choices[0].message.content)


CHAT_WAYS = [
    _raw_create,
    _client_raw_create,
    _raw_stream,
    _raw_parse,
    _streaming_create,
    _client_streaming_stream,
    _with_options,
    _copy_raw,
    _beta_parse,
    _beta_stream,
]


@pytest.mark.parametrize("is_async", [False, True])
async def test_every_way_to_call_chat_completions_is_a_turn(chat_base: str, is_async: bool) -> None:
    """One conversation, each turn through another path: every turn recorded, at its depth,
    by the model that answered, with every earlier reply attributed by its fingerprint."""
    cls = openai.AsyncOpenAI if is_async else openai.OpenAI
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = OpenAIClientWrapper(cls(base_url=chat_base, api_key="k", max_retries=0), m)
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"views {is_async}"}]
        for depth, way in enumerate(CHAT_WAYS, 1):
            text = await way(wrapped, messages, is_async)
            expected = reply_text(schedule(depth), depth)
            assert text in (expected, json.dumps({"answer": expected, "depth": depth})), way.__name__
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"next {depth}"}]
        assert m.flush(10)
        assert m.snapshot().monitor_errors == {}
    results = exp.results
    n = len(CHAT_WAYS)
    assert [r.context.depth for r in results] == list(range(1, n + 1))
    authors = [r.record.author for r in results]
    assert authors == [schedule(d) for d in range(1, n + 1)]
    assert [r.context.prefix_model for r in results] == ["none", *authors[:-1]]
    assert [[a.method for a in r.context.attributions] for r in results] == [["chain"] * d for d in range(n)]
    streamed = {_raw_stream.__name__, _client_streaming_stream.__name__, _beta_stream.__name__}
    assert [r.record.streamed for r in results] == [w.__name__ in streamed for w in CHAT_WAYS]
    assert all(len(r.checks) == 1 for r in results)


@pytest.mark.parametrize("is_async", [False, True])
async def test_every_way_to_call_responses_is_a_turn(responses_base: str, is_async: bool) -> None:
    """A ``previous_response_id`` chain whose calls go through the raw, client-level raw,
    raw-parse and streaming-response paths: four turns at depths 1-4, each reply attributed."""
    cls = openai.AsyncOpenAI if is_async else openai.OpenAI
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        w = OpenAIClientWrapper(cls(base_url=responses_base, api_key="k", max_retries=0), m)

        async def raw(**kw: Any) -> Any:
            return (await _maybe(w.responses.with_raw_response.create(**kw))).parse()

        async def client_raw(**kw: Any) -> Any:
            return (await _maybe(w.with_raw_response.responses.create(**kw))).parse()

        async def raw_parse(**kw: Any) -> Any:
            done = (await _maybe(w.responses.with_raw_response.parse(text_format=Answer, **kw))).parse()
            assert isinstance(done.output_parsed, Answer)
            return done

        async def streaming(**kw: Any) -> Any:
            async def use(response: Any) -> Any:
                return await _maybe(response.parse())

            return await _enter(w.responses.with_streaming_response.create(**kw), use)

        previous: str | None = None
        for depth, way in enumerate((raw, client_raw, raw_parse, streaming), 1):
            extra: dict[str, Any] = {"previous_response_id": previous} if previous else {}
            done = await way(model="gpt-x", input=f"responses {is_async} {depth}", **extra)
            expected = responses_text(schedule(depth), depth)
            assert done.output_text in (expected, json.dumps({"answer": expected, "depth": depth}))
            previous = done.id
        assert m.flush(10)
        assert m.snapshot().monitor_errors == {}
    results = exp.results
    assert [r.context.depth for r in results] == [1, 2, 3, 4]
    assert [r.record.author for r in results] == [schedule(d) for d in (1, 2, 3, 4)]
    assert [r.context.prefix_model for r in results] == ["none", schedule(1), schedule(2), schedule(3)]
    assert all(a.method == "response_id" for r in results[1:] for a in r.context.attributions)


@pytest.mark.parametrize("is_async", [False, True])
async def test_every_way_to_call_anthropic_messages_is_a_turn(messages_base: str, is_async: bool) -> None:
    """``messages.with_raw_response.create`` (plain and streamed, whose async raw response
    parses as a coroutine), ``client.with_raw_response.messages``, ``with_streaming_response``
    and a ``with_options`` copy: five turns, each earlier reply attributed."""
    cls = anthropic.AsyncAnthropic if is_async else anthropic.Anthropic
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        w = AnthropicClientWrapper(cls(base_url=messages_base, api_key="k", max_retries=0), m)
        kw: dict[str, Any] = {"model": "claude-x", "max_tokens": 100}

        async def raw(messages: list[Any]) -> Any:
            response = await _maybe(w.messages.with_raw_response.create(messages=messages, **kw))
            assert response.headers["content-type"].startswith("application/json")
            return await _maybe(response.parse())

        async def raw_stream(messages: list[Any]) -> Any:
            response = await _maybe(w.with_raw_response.messages.create(messages=messages, stream=True, **kw))
            events = await _maybe(response.parse())
            if hasattr(events, "__aiter__"):
                return [e async for e in events]
            return list(events)

        async def streaming(messages: list[Any]) -> Any:
            async def use(response: Any) -> Any:
                return await _maybe(response.parse())

            return await _enter(w.messages.with_streaming_response.create(messages=messages, **kw), use)

        async def options(messages: list[Any]) -> Any:
            return await _maybe(w.with_options(timeout=20.0).messages.create(messages=messages, **kw))

        history: list[Any] = [{"role": "user", "content": f"anthropic views {is_async}"}]
        for depth, way in enumerate((raw, raw_stream, streaming, options, raw), 1):
            got = await way(history)
            if isinstance(got, list):  # the raw event stream: the text deltas, in order
                text = "".join(
                    e.delta.text
                    for e in got
                    if e.type == "content_block_delta" and e.delta.type == "text_delta"
                )
            else:
                text = "".join(b.text for b in got.content if b.type == "text")
            assert text == messages_text(schedule(depth), depth)
            history += [{"role": "assistant", "content": text}, {"role": "user", "content": f"next {depth}"}]
        assert m.flush(10)
        assert m.snapshot().monitor_errors == {}
    results = exp.results
    assert [r.context.depth for r in results] == [1, 2, 3, 4, 5]
    assert [r.record.author for r in results] == [schedule(d) for d in (1, 2, 3, 4, 5)]
    assert [len(r.context.attributions) for r in results] == [0, 1, 2, 3, 4]
    assert all(a.method == "chain" for r in results for a in r.context.attributions)
    assert [r.record.streamed for r in results] == [False, True, False, False, False]


def test_a_body_read_without_parse_passes_through_unrecorded(chat_base: str) -> None:
    """``with_streaming_response`` read with ``iter_lines``: the SDK's lines, unchanged, and no
    turn (the SDK never parsed a reply to record). Documented, not silent: the concepts page."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        w = OpenAIClientWrapper(openai.OpenAI(base_url=chat_base, api_key="k", max_retries=0), m)
        messages = [{"role": "user", "content": "lines"}]
        with w.chat.completions.with_streaming_response.create(model="gpt-x", messages=messages) as response:
            body = json.loads("".join(response.iter_lines()))
        assert body["choices"][0]["message"]["content"] == reply_text(schedule(1), 1)
        assert m.flush(10)
    assert exp.results == []


@pytest.mark.parametrize("is_async", [False, True])
async def test_a_raw_body_the_sdk_cannot_parse_is_the_applications_to_see(is_async: bool) -> None:
    """A 200 whose body is not JSON: ``with_raw_response.create`` still returns the raw
    response (the application sees the SDK's parse error when it parses, as without
    handoffmon), and the monitor counts an integration error instead of a turn."""

    def garbage(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "application/json"}, content=b"<html>oops")

    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        if is_async:
            client: Any = openai.AsyncOpenAI(
                base_url="http://upstream/v1",
                api_key="k",
                max_retries=0,
                http_client=httpx.AsyncClient(transport=httpx.MockTransport(garbage)),
            )
        else:
            client = openai.OpenAI(
                base_url="http://upstream/v1",
                api_key="k",
                max_retries=0,
                http_client=httpx.Client(transport=httpx.MockTransport(garbage)),
            )
        w = OpenAIClientWrapper(client, m)
        raw = await _maybe(
            w.chat.completions.with_raw_response.create(
                model="gpt-x", messages=[{"role": "user", "content": "x"}]
            )
        )
        assert isinstance(raw, LegacyAPIResponse) and raw.http_response.content == b"<html>oops"
        with pytest.raises(json.JSONDecodeError):
            raw.parse()
        assert m.flush(10)
        assert m.snapshot().monitor_errors == {"integration": 1}
    assert exp.results == []


def test_views_keep_the_sdk_surface() -> None:
    """What the views do not monitor is the SDK's: other raw methods, other client-level raw
    resources, the streaming response's other attributes; a copy's own options."""
    upstream = Upstream()
    client = openai.OpenAI(
        base_url="http://upstream/v1",
        api_key="k",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(upstream)),
    )
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        w = OpenAIClientWrapper(client, m)
        assert w.chat.completions.with_raw_response.retrieve.__wrapped__ == client.chat.completions.retrieve
        assert type(w.with_raw_response.models) is type(client.with_raw_response.models)
        assert type(w.with_streaming_response.embeddings) is type(client.with_streaming_response.embeddings)
        copied = w.copy(default_headers={"x-app": "1"})
        assert copied.client.default_headers["x-app"] == "1" and "x-app" not in client.default_headers
        copied.chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": "copied"}])
        assert upstream.requests[-1]["messages"][0]["content"] == "copied"
        assert m.flush(10)
    assert [(r.context.depth, r.record.author) for r in exp.results] == [
        (1, "openai/gpt-b")
    ]  # x-litellm-model-name


def test_the_wrapper_passes_type_checks_as_its_client() -> None:
    """``isinstance(wrapped, openai.OpenAI)`` holds (and not for the other client class), so
    libraries that check a client's type take the wrapper: a pydantic ``InstanceOf`` field
    here, ``instructor.from_openai`` in the field. ``type()`` still names the wrapper, and the
    copies ``with_options`` returns pass the same checks."""
    with monitor(CONFIG) as m:
        sync = OpenAIClientWrapper(openai.OpenAI(api_key="k"), m)
        asynchronous = OpenAIClientWrapper(openai.AsyncOpenAI(api_key="k"), m)
        claude = AnthropicClientWrapper(anthropic.Anthropic(api_key="k"), m)
        assert isinstance(sync, openai.OpenAI) and not isinstance(sync, openai.AsyncOpenAI)
        assert isinstance(asynchronous, openai.AsyncOpenAI) and not isinstance(asynchronous, openai.OpenAI)
        assert isinstance(claude, anthropic.Anthropic) and not isinstance(claude, openai.OpenAI)
        assert type(sync) is OpenAIClientWrapper and isinstance(sync, OpenAIClientWrapper)
        copied = sync.with_options(timeout=3.0)
        assert type(copied) is OpenAIClientWrapper and isinstance(copied, openai.OpenAI)

        shallow = copy.copy(sync)  # frameworks copy their settings: a wrapper still, same monitor
        assert type(shallow) is OpenAIClientWrapper and shallow.monitor is m and shallow.client is sync.client
        assert isinstance(shallow.chat.completions, SyncCalls)

        class Settings(pydantic.BaseModel):
            client: pydantic.InstanceOf[openai.OpenAI]

        assert Settings(client=sync).client is sync
        with pytest.raises(pydantic.ValidationError):
            Settings(client=asynchronous)


def test_wrapping_a_wrapper_never_monitors_a_call_twice(chat_base: str) -> None:
    """``wrap(wrap(client))`` with the same runtime is the same wrapper; with another runtime it
    wraps the same client for that one. Either way a call is one turn, in one runtime."""
    from handoffmon.integrations import wrap
    from handoffmon.runtime import build_runtime

    first, second = RecordingExporter(), RecordingExporter()
    with (
        build_runtime(CONFIG, registry=None, exporters=[first]) as rt1,
        build_runtime(CONFIG, registry=None, exporters=[second]) as rt2,
    ):
        client = openai.OpenAI(base_url=chat_base, api_key="k", max_retries=0)
        once = wrap(client, runtime=rt1)
        assert wrap(once, runtime=rt1) is once
        moved = wrap(once, runtime=rt2)
        assert type(moved) is OpenAIClientWrapper and moved.client is client
        assert moved.monitor is rt2.monitor
        messages = [{"role": "user", "content": "wrapped twice"}]
        wrap(once, runtime=rt1).chat.completions.create(model="gpt-x", messages=messages)
        moved.chat.completions.create(model="gpt-x", messages=messages)
        assert rt1.flush(10) and rt2.flush(10)
    assert len(first.results) == 1 and len(second.results) == 1


def _parse_in_two_threads(response: Any) -> list[Any]:
    """What ``response.parse()`` gave each of two threads that are both past the SDK's parse
    (held at a barrier until both are in it) before either goes on, switching every µs."""
    import sys
    import threading

    sdk = response._response
    sdk_parse, body_lock, both_in = sdk.parse, threading.Lock(), threading.Barrier(2, timeout=5)

    def held(**kwargs: Any) -> Any:
        with body_lock:  # the SDK's response is read by one thread at a time
            parsed = sdk_parse(**kwargs)
        both_in.wait()
        return parsed

    sdk.parse = held
    got: list[Any] = []
    threads = [threading.Thread(target=lambda: got.append(response.parse())) for _ in range(2)]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
    finally:
        sys.setswitchinterval(switch)
    return got


def test_two_threads_parsing_one_response_at_once_record_one_turn_and_get_one_object() -> None:
    """``with_streaming_response``: the application's threads both call ``response.parse()``
    on the one response (a shared response handed to workers), each past the "not parsed yet"
    check before either has made the monitored result, one inside making it when the other
    checks again: the monitored result is still made once, one turn recorded per response
    (40 calls made 48 to 56 turns before), and both threads get the same object."""
    exp = RecordingExporter()
    transport = httpx.MockTransport(Upstream())
    client = openai.OpenAI(
        api_key="k", base_url="http://up/v1", http_client=httpx.Client(transport=transport)
    )
    rounds = 40
    with monitor(CONFIG, exporters=[exp]) as m:
        w = OpenAIClientWrapper(client, m)
        for n in range(rounds):
            messages = [{"role": "user", "content": f"hi {n}"}]
            with w.chat.completions.with_streaming_response.create(
                model="gpt-x", messages=messages
            ) as response:
                got = _parse_in_two_threads(response)
                assert len(got) == 2 and got[0] is got[1] is response.parse(), n
        assert m.flush(10)
    assert len(exp.results) == rounds
