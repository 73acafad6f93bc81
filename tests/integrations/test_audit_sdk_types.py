"""What the SDK's ``with_raw_response`` and ``with_streaming_response`` give passes for the SDK's
own classes through a wrapped client, as the client and its streams' chunks do.

A raw stream's response (``LegacyAPIResponse``) and a streamed response (``APIResponse`` /
``AsyncAPIResponse``, and the context managers giving them) were handoffmon's objects, so code
that branches on ``isinstance`` against the SDK's classes took its other branch.
"""

from __future__ import annotations

import copy
from typing import Any

import httpx
import openai
import pytest
from openai._legacy_response import LegacyAPIResponse
from openai._response import (
    APIResponse,
    AsyncAPIResponse,
    AsyncResponseContextManager,
    ResponseContextManager,
)

from handoffmon.integrations.openai_client import OpenAIClientWrapper
from handoffmon.testing import RecordingExporter
from tests.integrations.openai_mock import Upstream
from tests.pipeline.helpers import make_config, monitor

HI = [{"role": "user", "content": "hi"}]


def _client(m: Any, is_async: bool) -> Any:
    transport = httpx.MockTransport(Upstream())
    base = "http://u/v1"
    if is_async:
        http: Any = httpx.AsyncClient(transport=transport)
        return OpenAIClientWrapper(openai.AsyncOpenAI(api_key="k", base_url=base, http_client=http), m)
    http = httpx.Client(transport=transport)
    return OpenAIClientWrapper(openai.OpenAI(api_key="k", base_url=base, http_client=http), m)


def test_raw_stream_response_is_the_sdks_class() -> None:
    """``with_raw_response.create(stream=True)``: a ``LegacyAPIResponse``, its stream recorded."""
    exp = RecordingExporter()
    with monitor(make_config(), exporters=[exp]) as m:
        raw = _client(m, is_async=False).chat.completions.with_raw_response.create(
            model="primary", messages=HI, stream=True
        )
        assert isinstance(raw, LegacyAPIResponse)
        assert "".join(c.choices[0].delta.content for c in raw.parse()) == "reply number 1"
        m.flush(10)
    assert [r.record.streamed for r in exp.results] == [True]


def test_streaming_response_is_the_sdks_class() -> None:
    """``with_streaming_response.create``: the SDK's context manager giving an ``APIResponse``."""
    exp = RecordingExporter()
    with monitor(make_config(), exporters=[exp]) as m:
        manager = _client(m, is_async=False).chat.completions.with_streaming_response.create(
            model="primary", messages=HI
        )
        assert isinstance(manager, ResponseContextManager)
        with manager as response:
            assert isinstance(response, APIResponse)
            assert response.parse().choices[0].message.content == "reply number 1"
        m.flush(10)
    assert len(exp.results) == 1


async def test_async_streaming_response_is_the_sdks_class() -> None:
    """The async client's: ``AsyncResponseContextManager`` giving an ``AsyncAPIResponse``."""
    exp = RecordingExporter()
    with monitor(make_config(), exporters=[exp]) as m:
        manager = _client(m, is_async=True).chat.completions.with_streaming_response.create(
            model="primary", messages=HI
        )
        assert isinstance(manager, AsyncResponseContextManager)
        async with manager as response:
            assert isinstance(response, AsyncAPIResponse)
            assert (await response.parse()).choices[0].message.content == "reply number 1"
        m.flush(10)
    assert len(exp.results) == 1


PATHS = [
    ("chat",),
    ("chat", "completions"),
    ("responses",),
    ("chat", "completions", "with_raw_response"),
    ("chat", "completions", "with_streaming_response"),
    ("responses", "with_raw_response"),
    ("with_raw_response",),
    ("with_streaming_response",),
    ("with_raw_response", "chat"),
    ("with_raw_response", "chat", "completions"),
]


def _at(obj: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        obj = getattr(obj, name)
    return obj


@pytest.mark.parametrize("is_async", [False, True])
def test_monitored_resources_pass_for_the_sdks(is_async: bool) -> None:
    """``client.chat``, ``client.chat.completions``, ``client.responses`` and their raw and
    streamed-response views are instances of the SDK's classes for them, as the client is."""
    with monitor(make_config()) as m:
        wrapped = _client(m, is_async)
        for path in PATHS:
            sdk = _at(wrapped.client, path)
            assert isinstance(_at(wrapped, path), type(sdk)), path


def test_copies_of_monitored_resources_stay_monitored() -> None:
    """``copy.copy`` of ``client.chat.completions`` (and the other views) works as the SDK's does,
    where it raised ``RecursionError``, and the copy's calls are turns."""
    exp = RecordingExporter()
    with monitor(make_config(), exporters=[exp]) as m:
        wrapped = _client(m, is_async=False)
        for path in PATHS:
            assert isinstance(copy.copy(_at(wrapped, path)), type(_at(wrapped.client, path))), path
        completions = copy.copy(wrapped.chat.completions)
        assert completions.create(model="primary", messages=HI).choices[0].message.content == "reply number 1"
        raw = copy.copy(wrapped.chat.completions.with_raw_response.create(model="primary", messages=HI))
        assert raw.parse().choices[0].message.content == "reply number 2"
        m.flush(10)
    assert len(exp.results) == 2


async def _streamed_copies(client: Any, is_async: bool) -> tuple[bool, list[str]]:
    """``with_streaming_response.create(stream=True)``; the response copied before ``parse()``,
    then parsed through the copy and the original: (the same stream from both, the chunks' text
    read one from the copy's stream and the rest from the original's)."""
    manager = client.chat.completions.with_streaming_response.create(
        model="primary", messages=HI, stream=True
    )
    if is_async:
        async with manager as response:
            other = copy.copy(response)
            first, stream = await other.parse(), await response.parse()
            head = (await first.__anext__()).choices[0].delta.content
            return first is stream, [head, *[c.choices[0].delta.content async for c in stream]]
    with manager as response:
        other = copy.copy(response)
        first, stream = other.parse(), response.parse()
        head = next(first).choices[0].delta.content
        return first is stream, [head, *[c.choices[0].delta.content for c in stream]]


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_copied_streaming_response_parses_to_one_monitored_stream(is_async: bool) -> None:
    """``copy.copy`` of a ``with_streaming_response`` response, then ``parse()`` on the copy and
    on the original: the SDK gives one stream from both, so does the wrapper, and the turn is
    recorded once, whole. (Before: two monitored streams over the one SDK stream, each recording
    the chunks read through it: two turns, 'reply' and ' number 1'.)"""
    with monitor(make_config()) as m:
        unwrapped = await _streamed_copies(_client(m, is_async).client, is_async)
    assert unwrapped == (True, ["reply", " number", " 1"])
    exp = RecordingExporter()
    with monitor(make_config(), exporters=[exp]) as m:
        assert await _streamed_copies(_client(m, is_async), is_async) == unwrapped
        assert m.flush(10)
    assert [(r.record.reply_chars, r.record.streamed) for r in exp.results] == [(len("reply number 1"), True)]
