"""A stream left early through the OpenAI SDK's helpers is recorded when the helper closes.

``chat.completions.stream``, ``responses.stream`` and ``with_streaming_response`` close the
HTTP response (``raw_stream.response.close()``), not the stream object they read from, so the
wrapper's stream under them heard nothing: its turn waited for the cyclic collector (the
helper's generator holds the helper), and a next turn continuing the partial reply the
application saw was recorded first, with its prefix model ``unknown``. The collector is off in
these tests so the finalizer cannot stand in for the close.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from handoffmon.integrations.openai_client import OpenAIClientWrapper
from handoffmon.testing import RecordingExporter
from tests.integrations.openai_mock import Upstream
from tests.pipeline.helpers import make_config, monitor

HI = [{"role": "user", "content": "hi"}]
AUTHOR = "openai/gpt-b"  # the upstream's x-litellm-model-name


@pytest.fixture(autouse=True)
def no_collector() -> Iterator[None]:
    """The cyclic collector off: a turn recorded only by a finalizer is not recorded in time."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _wrapped(m: Any, is_async: bool) -> Any:
    upstream = Upstream()
    if is_async:
        aclient = openai.AsyncOpenAI(
            api_key="k",
            base_url="http://upstream/v1",
            http_client=httpx.AsyncClient(transport=httpx.MockTransport(upstream)),
        )
        return OpenAIClientWrapper(aclient, m)
    client = openai.OpenAI(
        api_key="k",
        base_url="http://upstream/v1",
        http_client=httpx.Client(transport=httpx.MockTransport(upstream)),
    )
    return OpenAIClientWrapper(client, m)


def _continued(seen: str) -> list[dict[str, Any]]:
    return [*HI, {"role": "assistant", "content": seen}, {"role": "user", "content": "go on"}]


def _prefixes(exp: RecordingExporter) -> list[tuple[int, str]]:
    return [(r.context.depth, r.context.prefix_model) for r in exp.results]


def test_chat_stream_helper_left_early_is_recorded_before_the_next_turn() -> None:
    """``with client.chat.completions.stream(...)`` left after the first delta: the partial reply
    is turn 1, and turn 2 continuing it has turn 1's author as its prefix model."""
    exp = RecordingExporter()
    with monitor(make_config(), exporters=[exp]) as m:
        w = _wrapped(m, is_async=False)
        with w.chat.completions.stream(model="primary", messages=HI) as stream:
            for event in stream:
                if event.type == "content.delta":
                    break
            seen = stream.current_completion_snapshot.choices[0].message.content
        w.chat.completions.create(model="primary", messages=_continued(seen))
        m.flush(10)
    assert _prefixes(exp) == [(1, "none"), (2, AUTHOR)]
    assert exp.results[0].record.streamed


async def test_async_chat_stream_helper_left_early_is_recorded_before_the_next_turn() -> None:
    """The async helper, left early on a live event loop: recorded at its ``async with`` exit."""
    exp = RecordingExporter()
    with monitor(make_config(), exporters=[exp]) as m:
        w = _wrapped(m, is_async=True)
        async with w.chat.completions.stream(model="primary", messages=HI) as stream:
            async for event in stream:
                if event.type == "content.delta":
                    break
            seen = stream.current_completion_snapshot.choices[0].message.content
        await w.chat.completions.create(model="primary", messages=_continued(seen))
        m.flush(10)
    assert _prefixes(exp) == [(1, "none"), (2, AUTHOR)]


async def test_stream_helper_manager_passes_for_the_sdks() -> None:
    """The helper's manager is still an instance of the SDK's manager class, and takes only the
    SDK's kind of ``with``."""
    from openai.lib.streaming.chat import AsyncChatCompletionStreamManager, ChatCompletionStreamManager

    with monitor(make_config()) as m:
        manager = _wrapped(m, is_async=False).chat.completions.stream(model="primary", messages=HI)
        assert isinstance(manager, ChatCompletionStreamManager)
        with manager as stream:
            assert stream.get_final_completion().choices[0].message.content == "reply number 1"
        amanager = _wrapped(m, is_async=True).chat.completions.stream(model="primary", messages=HI)
        assert isinstance(amanager, AsyncChatCompletionStreamManager)
        with pytest.raises(TypeError), amanager:  # an async helper in a plain ``with``, as the SDK's
            pass
        async with amanager as astream:
            assert (await astream.get_final_completion()).choices[0].message.content == "reply number 1"


def test_streaming_response_left_early_is_recorded_at_exit() -> None:
    """``with_streaming_response.create(stream=True)``: a body parsed, read in part, and left."""
    exp = RecordingExporter()
    with monitor(make_config(), exporters=[exp]) as m:
        w = _wrapped(m, is_async=False)
        with w.chat.completions.with_streaming_response.create(
            model="primary", messages=HI, stream=True
        ) as r:
            for chunk in r.parse():
                seen = chunk.choices[0].delta.content
                break
        w.chat.completions.create(model="primary", messages=_continued(seen))
        m.flush(10)
    assert _prefixes(exp) == [(1, "none"), (2, AUTHOR)]


async def test_async_streaming_response_left_early_is_recorded_at_exit() -> None:
    """The async ``with_streaming_response``, the same."""
    exp = RecordingExporter()
    with monitor(make_config(), exporters=[exp]) as m:
        w = _wrapped(m, is_async=True)
        async with w.chat.completions.with_streaming_response.create(
            model="primary", messages=HI, stream=True
        ) as r:
            async for chunk in await r.parse():
                seen = chunk.choices[0].delta.content
                break
        await w.chat.completions.create(model="primary", messages=_continued(seen))
        m.flush(10)
    assert _prefixes(exp) == [(1, "none"), (2, AUTHOR)]


@pytest.mark.parametrize("is_async", [False, True])
async def test_responses_stream_helper_left_early_is_recorded_at_exit(
    responses_base: str, is_async: bool
) -> None:
    """``with client.responses.stream(...)`` left at the first text delta: the turn is recorded
    by the time the block is left."""
    exp = RecordingExporter()
    with monitor(make_config(), exporters=[exp]) as m:
        if is_async:
            aw = OpenAIClientWrapper(openai.AsyncOpenAI(api_key="k", base_url=responses_base), m)
            async with aw.responses.stream(model="m", input="hi") as aevents:
                async for event in aevents:
                    if event.type == "response.output_text.delta":
                        break
        else:
            w = OpenAIClientWrapper(openai.OpenAI(api_key="k", base_url=responses_base), m)
            with w.responses.stream(model="m", input="hi") as events:
                for event in events:
                    if event.type == "response.output_text.delta":
                        break
        m.flush(10)
    assert [(r.context.depth, r.record.streamed) for r in exp.results] == [(1, True)]
