"""Copies of a monitored stream (``copy.copy``, ``copy.deepcopy``, ``pickle``) behave as the
unwrapped stream's — the real OpenAI SDK streams and a litellm Router ``mock_response`` stream —
and the turn is recorded once, however many copies are read or dropped."""

from __future__ import annotations

import copy
import gc
import pickle
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from handoffmon.integrations.openai_client import OpenAIClientWrapper
from handoffmon.integrations.router import RouterWrapper
from handoffmon.integrations.streaming import AsyncStream, SyncStream, settle
from handoffmon.testing import RecordingExporter
from tests.integrations.openai_mock import Upstream
from tests.integrations.routers import ALPHA_REPLY, BACKUP_REPLY, CANONICAL, fallback_router
from tests.pipeline.helpers import make_config, monitor

CONFIG = make_config(attribution={"canonical_models": {"openai/gpt-b": "model-b", **CANONICAL}})
MESSAGES = [{"role": "user", "content": "hi"}]
OPENAI_REPLY = Upstream().reply_text(1)  # "reply number 1": three chunks, ≤ 5 words (passes)


def _openai(is_async: bool) -> Any:
    transport = httpx.MockTransport(Upstream())
    if is_async:
        return openai.AsyncOpenAI(
            api_key="k", base_url="http://upstream/v1", http_client=httpx.AsyncClient(transport=transport)
        )
    return openai.OpenAI(
        api_key="k", base_url="http://upstream/v1", http_client=httpx.Client(transport=transport)
    )


async def _openai_stream(client: Any) -> Any:
    got = client.chat.completions.create(model="primary", messages=MESSAGES, stream=True)
    return (await got) if hasattr(got, "__await__") else got


async def _router_stream(router: Any, is_async: bool, model: str) -> Any:
    if is_async:
        return await router.acompletion(model=model, messages=MESSAGES, stream=True)
    return router.completion(model=model, messages=MESSAGES, stream=True)


async def _text(chunks: Any, is_async: bool) -> list[str]:
    if is_async:  # (LiteLLM's streams have __next__ and __anext__ both: the caller says which)
        return [c.choices[0].delta.content or "" async for c in chunks]
    return [c.choices[0].delta.content or "" for c in chunks]


async def _first_then_rest(stream: Any, other: Any, is_async: bool) -> list[str]:
    """One chunk read from ``stream``, the rest from ``other`` (its copy), the rest of ``stream``."""
    first = (await stream.__anext__()) if is_async else next(stream)
    rest = [*await _text(other, is_async), *await _text(stream, is_async)]
    return [first.choices[0].delta.content or "", *rest]


def _verdicts(exp: RecordingExporter) -> list[tuple[int, str, str]]:
    return [(r.record.reply_chars, c.verdict, c.reason) for r in exp.results for c in r.checks]


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_copied_openai_stream_reads_as_the_sdks_copy_and_is_one_turn(is_async: bool) -> None:
    """``copy.copy`` of a wrapped SDK stream shares its connection, as the SDK's copy does: the
    chunks split between the two read as they do unwrapped, and the turn is recorded once, whole.
    (Before: RecursionError from ``__getattr__`` on the half-built copy.)"""
    plain = await _openai_stream(_openai(is_async))
    expected = await _first_then_rest(plain, copy.copy(plain), is_async)
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        stream = await _openai_stream(OpenAIClientWrapper(_openai(is_async), m))
        twin = copy.copy(stream)
        assert type(twin) is type(stream) and twin is not stream and twin.response is stream.response
        assert await _first_then_rest(stream, twin, is_async) == expected
        m.flush(10)
    assert "".join(expected) == OPENAI_REPLY
    assert _verdicts(exp) == [(len(OPENAI_REPLY), "pass", "")]


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_deepcopy_and_pickle_raise_what_the_sdk_stream_raises(is_async: bool, how: str) -> None:
    """A live SDK stream cannot be deep-copied or pickled (it holds the client's lock): the
    wrapped one raises the same error, and the stream stays readable and is one turn."""
    act: Callable[[Any], Any] = copy.deepcopy if how == "deepcopy" else pickle.dumps
    plain = await _openai_stream(_openai(is_async))
    with pytest.raises(Exception) as unwrapped:
        act(plain)
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        stream = await _openai_stream(OpenAIClientWrapper(_openai(is_async), m))
        with pytest.raises(type(unwrapped.value)) as wrapped:
            act(stream)
        assert "".join(await _text(stream, is_async)) == OPENAI_REPLY
        m.flush(10)
    assert str(wrapped.value) == str(unwrapped.value)
    assert _verdicts(exp) == [(len(OPENAI_REPLY), "pass", "")]


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_copied_router_stream_is_one_turn_whichever_copy_is_read(is_async: bool) -> None:
    """A litellm Router ``mock_response`` stream: its copy and deep copy behave as LiteLLM's (the
    copy shares the stream, the deep copy raises); reading both copies records one turn."""
    plain = await _router_stream(fallback_router(), is_async, "primary")
    expected = await _first_then_rest(plain, copy.copy(plain), is_async)
    with pytest.raises(TypeError) as unwrapped:
        copy.deepcopy(await _router_stream(fallback_router(), is_async, "alpha"))
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = RouterWrapper(fallback_router(), m)
        stream = await _router_stream(wrapped, is_async, "primary")
        assert await _first_then_rest(stream, copy.copy(stream), is_async) == expected
        other = await _router_stream(wrapped, is_async, "alpha")
        with pytest.raises(TypeError) as deep:
            copy.deepcopy(other)
        assert "".join(await _text(other, is_async)) == ALPHA_REPLY
        m.flush(10)
    assert str(deep.value) == str(unwrapped.value)
    assert "".join(expected) == BACKUP_REPLY
    got = sorted(_verdicts(exp))
    assert got == [(len(ALPHA_REPLY), "pass", ""), (len(BACKUP_REPLY), "fail", got[1][2])]


def test_the_turn_is_reported_when_the_last_copy_is_dropped() -> None:
    """The original dropped while its copy is read to the end: the turn is complete, not cut off;
    both dropped unread: one cut-off turn, reported once the last of them goes."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = OpenAIClientWrapper(_openai(False), m)
        stream = wrapped.chat.completions.create(model="primary", messages=MESSAGES, stream=True)
        twin = copy.copy(stream)
        del stream
        gc.collect()
        assert "".join(c.choices[0].delta.content for c in twin) == OPENAI_REPLY
        dropped = wrapped.chat.completions.create(model="primary", messages=MESSAGES, stream=True)
        kept = copy.copy(dropped)
        next(dropped)
        del dropped
        gc.collect()
        assert settle(10)  # a report the finalizer thread is making is waited for
        m.flush(10)
        assert len(exp.results) == 1  # the copy of the second stream still lives
        del kept
        gc.collect()
        assert settle(10)
        m.flush(10)
    assert _verdicts(exp) == [(len(OPENAI_REPLY), "pass", ""), (len("reply"), "not_applicable", "incomplete")]


class _Replayable:
    """A stream object that can be deep-copied (a list and a position): each copy reads on its own."""

    def __init__(self, chunks: list[dict[str, Any]]) -> None:
        self.chunks, self.at = chunks, 0

    def __iter__(self) -> _Replayable:
        return self

    def __next__(self) -> dict[str, Any]:
        if self.at == len(self.chunks):
            raise StopIteration
        self.at += 1
        return self.chunks[self.at - 1]


@pytest.mark.parametrize("first", ["copy", "original"])
def test_a_deep_copy_is_a_second_reading_reported_once(first: str) -> None:
    """A stream that allows a deep copy: the copy yields what the unwrapped deep copy would (the
    rest of the stream, again), and the turn is reported once, by the reading that ends first."""
    seen: list[tuple[str, bool]] = []
    chunks = [{"choices": [{"delta": {"content": c}}]} for c in "abc"]
    stream = SyncStream(
        _Replayable(chunks), lambda out, _i: seen.append((out.reply["content"], out.completed))
    )
    assert next(stream) is chunks[0]
    twin = copy.deepcopy(stream)
    assert isinstance(twin, SyncStream) and twin._inner is not stream._inner
    readings = (twin, stream) if first == "copy" else (stream, twin)
    assert [list(r) for r in readings] == [chunks[1:], chunks[1:]]
    assert seen == [("abc", True)]
    with pytest.raises(TypeError, match="its turn is reported in this process"):
        pickle.dumps(stream)  # the inner pickles; a monitored stream does not leave the process


async def test_an_async_stream_made_without_init_raises_attribute_error() -> None:
    """The recursion's root: an instance whose ``_inner`` is not set yet raises AttributeError."""
    for kind in (SyncStream, AsyncStream):
        bare = object.__new__(kind)
        with pytest.raises(AttributeError):
            bare.anything  # noqa: B018
