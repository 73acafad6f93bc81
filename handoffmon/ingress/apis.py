"""The request/response shapes handoffmon reads as chat, one entry each: how a body is read, how
a response becomes a chat completion, and what folds a stream. ``serve``'s routes and the
in-process adapters pick theirs here, so every API goes through the same three readers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from handoffmon.ingress import anthropic, responses
from handoffmon.ingress.chunks import Folder
from handoffmon.ingress.request import ResponseLink


class Api(NamedTuple):
    """One API read as chat (chat completions themselves need none: they are chat)."""

    name: str
    """Route label in ``handoffmon_proxy_requests_total{route}``."""
    read_request: Callable[[Any], tuple[dict[str, Any] | None, str | None, ResponseLink | None]]
    """A request body as a chat body, why it is not monitored, and its link to stored history."""
    as_chat: Callable[[Any], dict[str, Any] | responses.NoReply | None]
    """A (non-streamed) response as a chat completion document; a ``NoReply`` when it finished
    without a reply (a Responses API ``failed`` response: counted, never a turn); ``None`` when
    it is no finished response (a ``queued`` background call's: its reply comes later)."""
    folder: Callable[[int], Folder]
    """A stream folder keeping at most that many characters of reply."""


RESPONSES = Api(
    "responses", responses.read_request, responses.finished_as_chat, responses.ResponsesStreamFolder
)
"""The OpenAI Responses API (``POST /v1/responses``; ADR 0010, 0011)."""

MESSAGES = Api("messages", anthropic.read_request, anthropic.answer_as_chat, anthropic.MessagesStreamFolder)
"""The Anthropic Messages API (``POST /v1/messages``; ADR 0012)."""
