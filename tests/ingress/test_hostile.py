"""Hostile or broken upstream values the ingress readers must read as absent, not pass on."""

from __future__ import annotations

import json
from typing import Any

import pytest

from handoffmon.ingress import ChunkFolder, usage_of
from handoffmon.ingress.anthropic import MessagesStreamFolder, message_as_chat
from handoffmon.ingress.fields import MAX_TOKENS
from handoffmon.ingress.responses import ResponsesStreamFolder, response_as_chat
from handoffmon.ingress.sse import SSEChunks

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


def _sse(events: list[dict[str, Any]]) -> bytes:
    return b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events)


CREATED = {"type": "response.created", "response": {"id": "resp_1", "model": "gpt-x", "output": []}}
TEXT = {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "Hi"}
ERROR_EVENTS = [
    {"type": "error", "code": "server_error", "message": "The server had an error", "sequence_number": 2},
    {"error": {"type": "server_error", "message": "upstream overloaded"}},  # the SDK raises this one
]


@pytest.mark.parametrize("error", ERROR_EVENTS, ids=["error_event", "error_body"])
def test_a_responses_stream_the_upstream_ends_with_an_error_event_is_one_verdict_however_read(
    error: dict[str, Any],
) -> None:
    """A Responses stream whose upstream sends an error before any text: read as raw bytes
    (``serve``, the proxy callback), as decoded events (the OpenAI SDK yields the ``error``
    event), or ended by the exception the SDK raises for an ``{"error": ...}`` payload (the
    wrappers: ``Folder.raised``), it is no reply, ``error``: no turn, counted, as a Messages
    stream's ``error`` event is. The event forms were a cut-off turn with an empty reply (the
    ``error_body`` one also counted as an odd event), so ``serve`` and the wrappers disagreed
    on the same upstream bytes. After text, an error leaves a cut-off turn in every form."""
    import httpx
    import openai

    raw = SSEChunks(folder=ResponsesStreamFolder())
    raw.feed(_sse([CREATED, error]))
    raw.close()
    decoded = ResponsesStreamFolder()
    for event in (CREATED, error):
        decoded.feed(event)
    sdk = ResponsesStreamFolder()
    sdk.feed(CREATED)
    sdk.raised(openai.APIError("stream error", httpx.Request("POST", "http://x/v1/responses"), body=error))
    for folder in (raw, decoded, sdk):
        out = folder.outcome(completed=False)
        assert (out.no_reply, out.completed, out.odd) == ("error", False, 0)
    said = ResponsesStreamFolder()
    for event in (CREATED, TEXT, error):
        said.feed(event)
    out = said.outcome(completed=False)
    assert (out.no_reply, out.completed, out.reply["content"]) == (None, False, "Hi")


def test_a_responses_stream_of_ever_new_content_parts_holds_bounded_state() -> None:
    """Text deltas each naming a new ``content_index`` (hostile or broken: a real answer has a
    few parts per item): the folder kept one text per part, with no bound but the stream's
    length (200,000 empty deltas held 47 MB, and one-character deltas up to ``max_chars``
    parts). Now at most ``MAX_TEXT_PARTS`` parts are kept, the rest counted odd, and the
    parts kept still read as the reply."""
    from handoffmon.ingress.responses import MAX_TEXT_PARTS

    folder = ResponsesStreamFolder()
    n = 5_000
    for i in range(n):
        folder.feed(
            {"type": "response.output_text.delta", "output_index": 0, "content_index": i, "delta": "a"}
        )
    assert len(folder._texts) == MAX_TEXT_PARTS
    out = folder.outcome(completed=False)
    assert out.odd == n - MAX_TEXT_PARTS
    assert [p["text"] for p in out.reply["content"]] == ["a"] * MAX_TEXT_PARTS


def test_a_messages_delta_for_a_block_never_started_is_counted_not_silently_dropped() -> None:
    """Events out of order (a broken or hostile upstream): text for a block whose
    ``content_block_start`` never came was dropped without a trace, and the stream, ended by
    ``message_stop``, recorded as a whole reply lacking it. Now each such delta counts odd
    (``monitor_errors{stage="parse"}``). A thinking block's own deltas are not text: still
    skipped, not counted."""
    start = {"type": "message_start", "message": {"id": "m", "model": "c", "content": []}}
    events = [
        start,
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "lost"}},
        {"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "Hi"}},
        {
            "type": "content_block_delta",
            "index": 3,
            "delta": {"type": "input_json_delta", "partial_json": "{"},
        },
        {"type": "message_stop"},
    ]
    folder = MessagesStreamFolder()
    for event in events:
        folder.feed(event)
    out = folder.outcome(completed=True)
    assert (out.reply["content"], out.odd) == ("Hi", 2)


def _deep(depth: int = 1100) -> Any:
    """Nesting ``str()`` and ``json.dumps`` cannot walk (orjson reads 1,024 levels; serve's
    parse of a body runs deeper in the stack than this test)."""
    value: Any = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


def test_values_nested_past_the_recursion_limit_are_read_never_raised() -> None:
    """A conversation id, session id, tool input, tool-call id or name, text or tool output
    nested past the recursion limit: every reader returns (the value read as the placeholder
    ``UNREADABLE``; the same value on both sides of a turn reads alike), where ``str()``
    and ``json.dumps`` raised ``RecursionError`` out of ``RequestParser.parse`` and the
    Responses and Messages readers ("never raises on odd input")."""
    from handoffmon.ingress import RequestParser
    from handoffmon.ingress import anthropic as messages_api
    from handoffmon.ingress import responses as responses_api
    from handoffmon.ingress.fields import UNREADABLE

    deep = _deep()
    parser = RequestParser()
    assert (
        parser.http_body({"messages": [], "metadata": {"conversation_id": deep}}, []).conversation_id is None
    )  # type: ignore[union-attr]
    assert parser.http_body({"messages": [], "litellm_session_id": deep}, []).conversation_id is None  # type: ignore[union-attr]
    assert (
        parser.openai_call({"messages": [], "extra_body": {"litellm_session_id": deep}}).conversation_id
        is None
    )

    call = {"type": "tool_use", "id": deep, "name": deep, "input": deep}
    sent = messages_api.read_request(
        {
            "system": [{"type": "text", "text": deep}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": deep}]},
                {"role": "assistant", "content": [call]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": deep, "content": deep}]},
            ],
        }
    )
    assert sent.doc is not None
    system, user, assistant, tool = sent.doc["messages"]
    assert system["content"] == UNREADABLE and user["content"] == UNREADABLE
    assert assistant["tool_calls"][0]["function"] == {"name": UNREADABLE, "arguments": UNREADABLE}
    assert tool == {"role": "tool", "tool_call_id": UNREADABLE, "content": UNREADABLE}
    reply = messages_api.message_as_chat({"content": [call]})
    assert reply is not None and reply["choices"][0]["message"]["tool_calls"] == assistant["tool_calls"]

    items = [
        {"role": "user", "content": deep},
        {"type": "function_call", "call_id": deep, "name": deep, "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": deep},
        {"role": "user", "content": [{"type": "input_text", "text": deep}]},
    ]
    got = responses_api.read_request({"input": items})
    assert got.doc is not None
    user, assistant, tool, user2 = got.doc["messages"]
    assert user["content"] == UNREADABLE and user2["content"] == UNREADABLE
    assert (
        assistant["tool_calls"][0]["id"] == UNREADABLE
        and assistant["tool_calls"][0]["function"]["name"] == UNREADABLE
    )
    assert tool["content"] == UNREADABLE


def test_messages_blocks_past_the_bound_are_counted_not_silently_dropped() -> None:
    """A Messages stream of more than ``MAX_TOOL_CALLS`` blocks (hostile: a real answer has a
    few): the blocks past the bound were dropped without a trace, whole text and tool input
    included. Each is now counted odd (``monitor_errors{stage="parse"}``), as its deltas are;
    the blocks kept read as the reply, and skipped thinking blocks stay uncounted."""
    from handoffmon.ingress.chunks import MAX_TOOL_CALLS

    folder = MessagesStreamFolder()
    folder.feed({"type": "message_start", "message": {"id": "m", "model": "c", "content": []}})
    folder.feed(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}
    )
    extra = 5
    for i in range(1, MAX_TOOL_CALLS + extra + 1):
        folder.feed(
            {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": "a"}}
        )
    out = folder.outcome(completed=False)
    assert out.odd == extra
    assert out.reply["content"] == [{"type": "text", "text": "a"}] * MAX_TOOL_CALLS


def test_a_responses_tool_call_item_is_kept_as_the_fields_read_not_whole() -> None:
    """A tool-call output item carries more than the reply reads (a built-in tool's
    ``action``, a hostile upstream's padding): the folder kept the item object whole, sized by
    its arguments alone, so 128 items of 100 KB of other fields held 12.8 MB past any
    ``max_chars``. Now it keeps the fields the reply is read from (type, ids, name, arguments
    or input), their text counted against ``max_chars``; the reply reads the same."""
    import tracemalloc

    from handoffmon.ingress.chunks import MAX_TOOL_CALLS

    def item(i: int) -> dict[str, Any]:
        return {
            "type": "function_call",
            "id": f"fc_{i}",
            "call_id": f"call_{i}",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
            "status": "completed",
            "padding": "x" * 100_000,
        }

    folder = ResponsesStreamFolder()
    tracemalloc.start()
    try:
        for i in range(MAX_TOOL_CALLS):
            folder.feed({"type": "response.output_item.done", "output_index": i, "item": item(i)})
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 1_000_000, held
    calls = folder.outcome(completed=False).reply["tool_calls"]
    assert calls[5] == {
        "id": "call_5",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    named = ResponsesStreamFolder(max_chars=100)
    named.feed(
        {"type": "response.output_item.done", "output_index": 0, "item": {**item(0), "name": "n" * 200}}
    )
    assert named.outcome(completed=False).too_large
