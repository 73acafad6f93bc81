"""Loopback upstreams the SDK-client tests talk to over HTTP, one per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import free_port
from tests.proxy.messages_upstream import MessagesUpstream
from tests.proxy.mock_upstream import MockUpstream, ServerThread
from tests.proxy.responses_upstream import ResponsesUpstream


@pytest.fixture(scope="module")
def chat_base() -> Iterator[str]:
    """Base URL (``.../v1``) of a chat completions upstream (``MockUpstream``)."""
    with ServerThread(MockUpstream(), free_port()) as srv:
        yield f"{srv.url}/v1"


@pytest.fixture(scope="module")
def responses_base() -> Iterator[str]:
    """Base URL (``.../v1``) of a Responses API upstream (``ResponsesUpstream``)."""
    with ServerThread(ResponsesUpstream(), free_port()) as srv:
        yield f"{srv.url}/v1"


@pytest.fixture(scope="module")
def messages_base() -> Iterator[str]:
    """Base URL of an Anthropic Messages upstream (``MessagesUpstream``; the SDK adds ``/v1``)."""
    with ServerThread(MessagesUpstream(), free_port()) as srv:
        yield srv.url
