"""The Anthropic Messages API read as chat: a reply and the same blocks sent back normalize
alike (text, tool calls, thinking skipped), streams fold to the JSON reply, readers are total."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from handoffmon.attribution.normalize import normalize_message
from handoffmon.ingress import reply_message
from handoffmon.ingress.anthropic import MessagesStreamFolder, message_as_chat, read_request

TOOL = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "refunds", "limit": 3}}
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-x",
    "content": [
        {"type": "thinking", "thinking": "let me think", "signature": "sig"},
        {"type": "text", "text": "Looking that up."},
        TOOL,
    ],
    "stop_reason": "tool_use",
    "usage": {"input_tokens": 21, "output_tokens": 9},
}


def _events(message: dict[str, Any], json_pieces: int = 3) -> list[dict[str, Any]]:
    """A Messages event stream of ``message``: start, blocks with their deltas, delta, stop."""
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}},
        {"type": "ping"},
    ]
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            events.append(
                {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}
            )
            text = block["text"]
            for k in range(0, len(text), 5):
                delta = {"type": "text_delta", "text": text[k : k + 5]}
                events.append({"type": "content_block_delta", "index": i, "delta": delta})
        elif block["type"] == "tool_use":
            events.append(
                {"type": "content_block_start", "index": i, "content_block": {**block, "input": {}}}
            )
            raw = json.dumps(block["input"])  # the API's own spacing and key order
            step = max(1, len(raw) // json_pieces)
            for k in range(0, len(raw), step):
                delta = {"type": "input_json_delta", "partial_json": raw[k : k + step]}
                events.append({"type": "content_block_delta", "index": i, "delta": delta})
        else:
            events.append(
                {"type": "content_block_start", "index": i, "content_block": {**block, "thinking": ""}}
            )
            delta = {"type": "thinking_delta", "thinking": block.get("thinking", "")}
            events.append({"type": "content_block_delta", "index": i, "delta": delta})
        events.append({"type": "content_block_stop", "index": i})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"]},
            "usage": {"output_tokens": 9},
        }
    )
    events.append({"type": "message_stop"})
    return events


def test_a_reply_and_the_same_blocks_sent_back_normalize_alike() -> None:
    """The response's blocks as a reply, and as the assistant message of the next request:
    the same chat message (thinking skipped, tool input as canonical JSON)."""
    reply = reply_message(message_as_chat(MESSAGE))
    sent_back = {"role": "assistant", "content": MESSAGE["content"]}
    doc, skip, _ = read_request({"model": "m", "messages": [{"role": "user", "content": "hi"}, sent_back]})
    assert skip is None and doc is not None
    assert normalize_message(doc["messages"][-1]) == normalize_message(reply)
    assert reply["content"] == "Looking that up."
    assert reply["tool_calls"] == [
        {
            "id": "toolu_1",
            "type": "function",
            "function": {"name": "lookup", "arguments": '{"limit":3,"q":"refunds"}'},
        }
    ]


def test_requests_read_as_chat() -> None:
    """System blocks, user text, tool results in place, images kept as parts."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    doc, skip, _ = read_request(
        {
            "model": "claude-x",
            "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools."}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "what is this?"}, image]},
                {"role": "assistant", "content": [TOOL]},
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_1",
                            "content": [{"type": "text", "text": "42"}],
                        },
                        {"type": "text", "text": "and now?"},
                    ],
                },
            ],
            "metadata": {"user_id": "u-1"},
        }
    )
    assert skip is None and doc is not None
    assert [m["role"] for m in doc["messages"]] == ["system", "user", "assistant", "tool", "user"]
    assert doc["messages"][0]["content"] == "Be brief.\nUse tools."
    assert doc["messages"][1]["content"] == [{"type": "text", "text": "what is this?"}, image]
    assert doc["messages"][3] == {"role": "tool", "tool_call_id": "toolu_1", "content": "42"}
    assert doc["messages"][4] == {"role": "user", "content": "and now?"}
    assert doc["metadata"] == {"user_id": "u-1"}
    assert read_request({"model": "m"}) == (None, "no_messages", None)
    assert read_request(["x"]) == (None, "no_messages", None)


def test_a_stream_folds_to_the_json_reply() -> None:
    """Text deltas and a tool call's partial JSON (the API's spacing) fold to the reply the
    JSON response gives, with id, model, finish reason and usage."""
    folder = MessagesStreamFolder()
    for event in _events(MESSAGE):
        folder.feed(event)
    assert folder.done
    out = folder.outcome(completed=True)
    assert normalize_message(out.reply) == normalize_message(reply_message(message_as_chat(MESSAGE)))
    assert (out.response_id, out.response_model, out.finish_reason) == ("msg_1", "claude-x", "tool_calls")
    assert (out.input_tokens, out.output_tokens, out.completed, out.odd) == (21, 9, True, 0)


def test_a_cut_stream_keeps_what_arrived_and_a_long_one_keeps_nothing() -> None:
    events = _events({**MESSAGE, "content": [{"type": "text", "text": "a fairly long answer here"}]})
    folder = MessagesStreamFolder()
    for event in events[:5]:
        folder.feed(event)
    assert not folder.done and folder.outcome(completed=False).reply["content"] == "a fairly l"
    small = MessagesStreamFolder(max_chars=8)
    for event in events:
        small.feed(event)
    out = small.outcome(completed=True)
    assert out.too_large and out.reply == {"role": "assistant", "content": None}


def test_an_error_event_marks_the_stream_not_completed() -> None:
    folder = MessagesStreamFolder()
    for event in [*_events(MESSAGE)[:3], {"type": "error", "error": {"type": "overloaded_error"}}]:
        folder.feed(event)
    assert not folder.outcome(completed=True).completed


_KEYS = [
    "type",
    "text",
    "id",
    "name",
    "input",
    "content",
    "role",
    "index",
    "delta",
    "message",
    "partial_json",
]
_json = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.text(max_size=6),
        st.sampled_from(["text", "tool_use", "thinking", "tool_result", "content_block_start", "text_delta"]),
    ),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.sampled_from(_KEYS), kids, max_size=5),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(body=_json, message=_json, events=st.lists(_json, max_size=6))
def test_the_readers_are_total(body: Any, message: Any, events: list[Any]) -> None:
    """Whatever a client or an upstream sends: nothing raises, and every result has the
    shape its caller relies on."""
    got = read_request(body if not isinstance(body, dict) else {"messages": [body], **body})
    assert (got.doc is None) != (got.skip is None)
    if got.doc is not None:
        assert all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in got.doc["messages"])
    doc = message_as_chat(message)
    assert doc is None or doc["choices"][0]["message"]["role"] == "assistant"
    folder = MessagesStreamFolder(max_chars=50)
    for event in events:
        folder.feed(event)
    out = folder.outcome(completed=True)
    assert out.chunks == len(events) and out.reply["role"] == "assistant"


def test_a_tool_call_whose_start_carries_its_input_folds_alike() -> None:
    """A server tool's call may arrive whole in ``content_block_start`` (no ``partial_json``):
    its input is kept from there, so the stream gives the JSON response's reply."""
    call = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}}
    message = {**MESSAGE, "content": [call, {"type": "text", "text": "Found it."}], "stop_reason": "end_turn"}
    events = [
        {"type": "message_start", "message": {**message, "content": []}},
        {"type": "content_block_start", "index": 0, "content_block": call},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Found it."}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_stop"},
    ]
    folder = MessagesStreamFolder()
    for event in events:
        folder.feed(event)
    out = folder.outcome(completed=True)
    assert normalize_message(out.reply) == normalize_message(reply_message(message_as_chat(message)))
    assert out.reply["tool_calls"][0]["function"]["arguments"] == '{"query":"x"}'


def test_a_cache_breakpoint_moved_off_an_image_keeps_the_chain() -> None:
    """Prompt caching puts ``cache_control`` on the request's last block and moves it to the new
    last block next turn: a short reply after an image the breakpoint left is still found by
    chain (the image's digest ignored the moved key; before, the reply was ``unknown``)."""
    from handoffmon.attribution import Attributor
    from handoffmon.stores.memory import MemoryStore

    attributor = Attributor(MemoryStore())
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    cache = {"cache_control": {"type": "ephemeral"}}
    first = read_request(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "What is it?"}, {**image, **cache}]}
            ],
        }
    ).doc
    assert first is not None
    ctx = attributor.attribute(first["messages"])
    reply = reply_message(message_as_chat({"content": [{"type": "text", "text": "A cat."}]}))
    attributor.persist(attributor.record(ctx, reply, ["claude"]))
    nxt = read_request(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "What is it?"}, image]},
                {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
                {"role": "user", "content": [{"type": "text", "text": "Sure?", **cache}]},
            ],
        }
    ).doc
    assert nxt is not None
    ctx = attributor.attribute(nxt["messages"])
    assert [(a.author, a.method) for a in ctx.attributions] == [("claude", "chain")]
    assert (ctx.depth, ctx.prefix_model) == (2, "claude")


def test_blocks_kept_whole_count_against_the_cap() -> None:
    """A server tool's result block (web search results) is kept whole, and counted nothing:
    128 such blocks of 1 MB each (serve's SSE event cap) held 128 MB past a 16M-character cap.
    Its JSON counts now: past ``max_chars`` the stream keeps nothing and is ``too_large``."""
    result = {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_1",
        "content": [{"title": "x" * 5_000}],
    }
    folder = MessagesStreamFolder(max_chars=4_000)
    folder.feed({"type": "message_start", "message": {"id": "msg_1", "model": "m", "usage": {}}})
    folder.feed({"type": "content_block_start", "index": 0, "content_block": result})
    folder.feed({"type": "message_stop"})
    out = folder.outcome(completed=True)
    assert out.too_large and out.reply == {"role": "assistant", "content": None}
    roomy = MessagesStreamFolder()
    for event in (
        {"type": "content_block_start", "index": 0, "content_block": result},
        {"type": "message_stop"},
    ):
        roomy.feed(event)
    assert not roomy.outcome(completed=True).too_large
    assert roomy.outcome(completed=True).reply["content"] == [result]


def test_a_block_whose_type_is_no_string_folds_without_raising_and_reads_back_alike() -> None:
    """A ``content_block_start`` whose block ``type`` is an object or a list (a hostile or
    broken upstream): kept whole as any unknown block, and the outcome is read, not raised
    (``outcome`` raised ``TypeError: unhashable type``: the proxy callback's stream hook
    raised it into the response, a wrapper's turn was lost uncounted). Its reply and the same
    blocks sent back as history normalize alike, as for any block."""
    for odd_type in ({"x": 1}, ["tool_use"]):
        block = {"type": odd_type, "data": "d"}
        folder = MessagesStreamFolder()
        for event in [
            {"type": "message_start", "message": {"id": "m", "model": "c", "content": []}},
            {"type": "content_block_start", "index": 0, "content_block": block},
            {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi"}},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
            {"type": "message_stop"},
        ]:
            folder.feed(event)
        out = folder.outcome(completed=True)
        assert (out.completed, out.odd, out.no_reply) == (True, 0, None)
        assert out.reply["content"] == [block, {"type": "text", "text": "Hi"}]
        sent_back = read_request(
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {"role": "assistant", "content": [block, {"type": "text", "text": "Hi"}]},
                ]
            }
        )
        assert sent_back.doc is not None
        assert normalize_message(sent_back.doc["messages"][-1]) == normalize_message(out.reply)
