"""What the SDK's ``with_raw_response`` and ``with_streaming_response`` give passes for the SDK's
own classes through a wrapped client, as the client and its streams' chunks do.

A raw stream's response (``LegacyAPIResponse``) and a streamed response (``APIResponse`` /
``AsyncAPIResponse``, and the context managers giving them) were handoffmon's objects, so code
that branches on ``isinstance`` against the SDK's classes took its other branch.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
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
