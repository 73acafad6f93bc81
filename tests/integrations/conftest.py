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
def messages_upstream() -> Iterator[tuple[MessagesUpstream, str]]:
    """An Anthropic Messages upstream (``MessagesUpstream``) and its base URL (the SDK adds ``/v1``)."""
    app = MessagesUpstream()
    with ServerThread(app, free_port()) as srv:
        yield app, srv.url


@pytest.fixture(scope="module")
def messages_base(messages_upstream: tuple[MessagesUpstream, str]) -> str:
    """Base URL of the module's Anthropic Messages upstream."""
    return messages_upstream[1]
