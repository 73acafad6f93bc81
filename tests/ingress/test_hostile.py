"""Hostile or broken upstream values the ingress readers must read as absent, not pass on."""

from __future__ import annotations

from typing import Any

import pytest

from handoffmon.ingress import ChunkFolder, usage_of
from handoffmon.ingress.anthropic import MessagesStreamFolder, message_as_chat
from handoffmon.ingress.fields import MAX_TOKENS
from handoffmon.ingress.responses import ResponsesStreamFolder, response_as_chat

ODD_COUNTS = [-1, MAX_TOKENS + 1, 10**400, 1.0, True, "5", None, [3]]


def _chat(n: Any) -> tuple[int | None, int | None]:
    u = usage_of({"choices": [], "usage": {"prompt_tokens": n, "completion_tokens": n}})
    return u.input_tokens, u.output_tokens


def _chunks(n: Any) -> tuple[int | None, int | None]:
    folder = ChunkFolder()
    folder.feed({"choices": [], "usage": {"prompt_tokens": n, "completion_tokens": n}})
    out = folder.outcome(completed=True)
    return out.input_tokens, out.output_tokens


def _responses(n: Any) -> tuple[int | None, int | None]:
    response = {"status": "completed", "output": [], "usage": {"input_tokens": n, "output_tokens": n}}
    folder = ResponsesStreamFolder()
    folder.feed({"type": "response.completed", "response": response})
    out = folder.outcome(completed=True)
    doc = response_as_chat(response)
    assert doc is not None and _chat_doc(doc) == (out.input_tokens, out.output_tokens)
    return out.input_tokens, out.output_tokens


def _messages(n: Any) -> tuple[int | None, int | None]:
    folder = MessagesStreamFolder()
    folder.feed({"type": "message_start", "message": {"content": [], "usage": {"input_tokens": n}}})
    folder.feed({"type": "message_delta", "delta": {}, "usage": {"output_tokens": n}})
    out = folder.outcome(completed=True)
    doc = message_as_chat({"content": [], "usage": {"input_tokens": n, "output_tokens": n}})
    assert doc is not None and _chat_doc(doc) == (out.input_tokens, out.output_tokens)
    return out.input_tokens, out.output_tokens


def _chat_doc(doc: dict[str, Any]) -> tuple[int | None, int | None]:
    u = usage_of(doc)
    return u.input_tokens, u.output_tokens


READERS = [_chat, _chunks, _responses, _messages]


@pytest.mark.parametrize("read", READERS, ids=lambda r: r.__name__)
def test_token_counts_outside_int64_or_not_ints_are_read_as_absent(read: Any) -> None:
    """Every reader (chat JSON, chat chunks, Responses and Messages, streamed or not) reads a
    usage count as a token count only when it is an ``int`` in ``0..2**63-1``: a negative,
    a float, a bool, a string or a number OTLP cannot encode (past int64; the turn's span
    carries it) is no count. Readers used to pass any ``int`` on."""
    for n in ODD_COUNTS:
        assert read(n) == (None, None), n
    for n in (0, 7, MAX_TOKENS):
        assert read(n) == (n, n), n
