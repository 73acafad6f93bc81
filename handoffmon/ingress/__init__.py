"""Ingress: the one place a call is read — request, conversation id, "served by", stream chunks.

Every adapter (``wrap`` of a Router or an OpenAI client, the LiteLLM Proxy callback,
``handoffmon serve``) parses its request with ``RequestParser``, describes the finished
call with ``Outcome`` / ``describe_response`` and folds streams with ``ChunkFolder``, so
they agree on conversation ids, authors and tool calls. The OpenAI Responses API is read as
chat first (``ingress.responses``), then takes the same path.
"""

from __future__ import annotations

from handoffmon.ingress.chunks import ChunkFolder, StreamOutcome
from handoffmon.ingress.conversation import caller_conversation_id
from handoffmon.ingress.request import KEPT_KEYS, Request, RequestParser, ResponseLink
from handoffmon.ingress.served import (
    Outcome,
    ServedBy,
    author,
    describe_response,
    describe_stream,
    reply_message,
    served_by_headers,
    served_by_response,
    usage_of,
)

__all__ = [
    "KEPT_KEYS",
    "ChunkFolder",
    "Outcome",
    "Request",
    "RequestParser",
    "ResponseLink",
    "ServedBy",
    "StreamOutcome",
    "author",
    "caller_conversation_id",
    "describe_response",
    "describe_stream",
    "reply_message",
    "served_by_headers",
    "served_by_response",
    "usage_of",
]
