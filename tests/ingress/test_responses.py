"""The Responses API read as chat: items, requests, responses and event streams."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from openai.types.responses import Response

from handoffmon.attribution.normalize import normalize_message
from handoffmon.ingress.request import ResponseLink
from handoffmon.ingress.responses import (
    NoReply,
    ResponsesStreamFolder,
    finished_as_chat,
    items_as_messages,
    read_request,
    response_as_chat,
)
from handoffmon.pipeline.reply import calls_tools_only, reply_text

MESSAGE = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "content": [
        {"type": "output_text", "text": "First part.", "annotations": []},
        {"type": "output_text", "text": "Second  part.", "annotations": []},
    ],
}
CALL = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_1",
    "name": "lookup",
    "arguments": '{"q": "x"}',
    "status": "completed",
}
REASONING = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"}
_KEYS = [
    "type",
    "role",
    "content",
    "text",
    "input",
    "output",
    "instructions",
    "call_id",
    "name",
    "arguments",
    "response",
    "delta",
    "output_index",
    "content_index",
    "item",
    "status",
    "model",
    "id",
    "usage",
    "previous_response_id",
    "refusal",
    "incomplete_details",
    "reason",
    "x",
]
_TYPES = [
    "message",
    "function_call",
    "custom_tool_call",
    "web_search_call",
    "function_call_output",
    "reasoning",
    "output_text",
    "refusal",
    "assistant",
    "user",
    "response.completed",
    "response.output_text.delta",
    "response.output_item.done",
    "response.created",
]


def _response(output: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "gpt-x-2026",
        "status": "completed",
        "output": output,
        "usage": {"input_tokens": 11, "output_tokens": 7, "total_tokens": 18},
        **extra,
    }


@pytest.mark.parametrize(
    "output",
    [
        [REASONING, MESSAGE],
        [REASONING, CALL],
        [MESSAGE, CALL],
        [{**MESSAGE, "content": [{"type": "refusal", "refusal": "I can't help with that."}]}],
        [CALL, {**CALL, "id": "fc_2", "call_id": "call_2", "arguments": "{}"}],
    ],
)
def test_a_reply_and_its_echo_normalize_alike(output: list[dict[str, Any]]) -> None:
    """The invariant attribution needs: a response's output read as the reply, and the same
    items sent back in the next request's input read as history, are one identical message."""
    doc = response_as_chat(_response(output))
    assert doc is not None
    reply = doc["choices"][0]["message"]
    request = read_request({"model": "m", "input": [{"role": "user", "content": "hi"}, *output]})
    assert request.doc is not None and request.skip is None
    history = request.doc["messages"]
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert normalize_message(history[1]) == normalize_message(reply)


def test_the_sdk_objects_read_like_their_json() -> None:
    """An OpenAI SDK ``Response`` (the wrapped client's shape) reads as its JSON does."""
    raw = _response([REASONING, MESSAGE, CALL], parallel_tool_calls=True, tool_choice="auto", tools=[])
    raw["usage"] = {
        **raw["usage"],
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 2},
    }
    assert response_as_chat(Response.model_validate(raw)) == response_as_chat(raw)


def test_reply_fields_text_usage_and_finish_reason() -> None:
    doc = response_as_chat(_response([REASONING, MESSAGE]))
    assert doc is not None
    assert doc["id"] == "resp_1" and doc["model"] == "gpt-x-2026"
    assert doc["usage"] == {"prompt_tokens": 11, "completion_tokens": 7}
    (choice,) = doc["choices"]
    assert choice["finish_reason"] == "stop"
    assert reply_text(choice["message"]) == "First part.\nSecond  part."
    tools = response_as_chat(_response([REASONING, CALL]))
    assert tools is not None
    message = tools["choices"][0]["message"]
    assert tools["choices"][0]["finish_reason"] == "tool_calls"
    assert calls_tools_only(message, reply_text(message))
    assert message["tool_calls"][0]["id"] == "call_1"  # the id the output item answers
    cut = response_as_chat(
        _response([MESSAGE], status="incomplete", incomplete_details={"reason": "max_output_tokens"})
    )
    assert cut is not None and cut["choices"][0]["finish_reason"] == "length"
    assert response_as_chat({"object": "chat.completion", "choices": []}) is None


def test_request_history_roles_instructions_and_tool_outputs() -> None:
    body = {
        "model": "gpt-x",
        "instructions": "Be terse.",
        "metadata": {"conversation_id": "c-1"},
        "input": [
            {"role": "developer", "content": "Use metric units."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
            REASONING,
            CALL,
            {"type": "function_call_output", "call_id": "call_1", "output": '{"t": 21}'},
            MESSAGE,
            {"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]},
        ],
    }
    request = read_request(body)
    assert request.doc is not None
    messages = request.doc["messages"]
    assert [m["role"] for m in messages] == [
        "system",
        "developer",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert messages[0]["content"] == "Be terse." and messages[2]["content"] == "Weather?"
    assert messages[4] == {"role": "tool", "tool_call_id": "call_1", "content": '{"t": 21}'}
    assert messages[6]["content"] == [{"type": "input_image", "image_url": "https://x/y.png"}]
    assert request.doc["metadata"] == {"conversation_id": "c-1"} and request.doc["model"] == "gpt-x"
    assert read_request({"model": "m", "input": "just text"}).doc == {
        "model": "m",
        "messages": [{"role": "user", "content": "just text"}],
    }


@pytest.mark.parametrize(
    ("body", "skip"),
    [
        (
            {"model": "m", "input": "more", "conversation": "conv_1", "previous_response_id": "r"},
            "server_state",
        ),
        ({"model": "m", "input": "more", "conversation": {"no": "id"}}, "server_state"),
        ({"model": "m", "input": "more", "conversation": 7}, "server_state"),
        ({"model": "m", "input": "more", "conversation": "   "}, "server_state"),
        ({"model": "m", "input": "more", "previous_response_id": ["resp_0"]}, "server_state"),
        ({"model": "m"}, "no_messages"),
        ({"model": "m", "input": 3}, "no_messages"),
        (["not", "a", "body"], "no_messages"),
    ],
)
def test_requests_that_are_not_monitored_say_why(body: Any, skip: str) -> None:
    assert read_request(body) == (None, skip, None)


@pytest.mark.parametrize(
    ("extra", "link"),
    [
        ({}, ResponseLink(None, True)),  # stored by default: a later call may continue it
        ({"store": False}, None),  # neither stored nor continuing: a plain turn
        ({"previous_response_id": "resp_0"}, ResponseLink("resp_0", True)),
        ({"previous_response_id": "resp_0", "store": False}, ResponseLink("resp_0", False)),
        ({"previous_response_id": ""}, ResponseLink(None, True)),
        ({"previous_response_id": None, "store": None}, ResponseLink(None, True)),
        ({"conversation": "conv_1"}, ResponseLink(None, True, "conv_1")),
        ({"conversation": {"id": "conv_2"}, "store": False}, ResponseLink(None, False, "conv_2")),
        ({"conversation": " conv_3 "}, ResponseLink(None, True, "conv_3")),
        ({"conversation": "c" * 100_000}, ResponseLink(None, True, "c" * 256)),  # bounded, as caller ids
    ],
)
def test_the_link_names_the_response_continued_and_whether_this_one_is_kept(
    extra: dict[str, Any], link: ResponseLink | None
) -> None:
    """``previous_response_id`` continues a stored response, ``conversation`` a conversation
    object: the request is read as its new input only, and the link says whose key holds the
    hidden history (ADR 0011)."""
    doc, skip, got = read_request({"model": "m", "input": "more", **extra})
    assert skip is None and got == link
    assert doc is not None and doc["messages"] == [{"role": "user", "content": "more"}]


def test_unknown_items_become_stable_placeholders() -> None:
    """An item type this version does not know keeps its place in the history (the same
    placeholder every time), so the messages around it still attribute."""
    item = {"type": "future_item", "id": "fi_1", "payload": {"a": 1}}
    first = items_as_messages([{"role": "user", "content": "q"}, item, MESSAGE])
    again = items_as_messages([{"role": "user", "content": "q"}, dict(item), MESSAGE])
    assert [normalize_message(m) for m in first] == [normalize_message(m) for m in again]
    assert [m["role"] for m in first] == ["user", "user", "assistant"]


def _events(response: dict[str, Any]) -> list[dict[str, Any]]:
    """A Responses event stream of ``response``: created, deltas per part, items, completed."""
    events: list[dict[str, Any]] = [{"type": "response.created", "response": {**response, "output": []}}]
    for index, item in enumerate(response["output"]):
        events.append(
            {"type": "response.output_item.added", "output_index": index, "item": {**item, "content": []}}
        )
        for c, part in enumerate(item.get("content") or ()):
            text = part.get("text") or part.get("refusal")
            kind = "response.output_text.delta" if part["type"] == "output_text" else "response.refusal.delta"
            for k in range(0, len(text), 4):
                events.append(
                    {"type": kind, "output_index": index, "content_index": c, "delta": text[k : k + 4]}
                )
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": response})
    return events


def test_stream_folds_to_the_json_reply() -> None:
    response = _response([REASONING, MESSAGE, CALL])
    folder = ResponsesStreamFolder()
    for event in _events(response):
        assert not folder.done
        folder.feed(json.loads(json.dumps(event)))
    assert folder.done
    out = folder.outcome(completed=True)
    doc = response_as_chat(response)
    assert doc is not None
    assert out.reply == doc["choices"][0]["message"]
    assert (out.response_id, out.response_model, out.finish_reason) == ("resp_1", "gpt-x-2026", "tool_calls")
    assert (out.input_tokens, out.output_tokens, out.odd, out.completed) == (11, 7, 0, True)


def test_cut_off_stream_keeps_what_the_deltas_built() -> None:
    """Without the terminal event the reply is the deltas' text per part and the tool calls
    whose items arrived; it normalizes as the complete reply would."""
    response = _response([REASONING, MESSAGE, CALL])
    folder = ResponsesStreamFolder()
    for event in _events(response)[:-1]:
        folder.feed(event)
    assert not folder.done
    out = folder.outcome(completed=False)
    doc = response_as_chat(response)
    assert doc is not None
    assert normalize_message(out.reply) == normalize_message(doc["choices"][0]["message"])
    assert out.finish_reason is None and out.completed is False and out.response_id == "resp_1"


@pytest.mark.parametrize(
    "tail",
    [[], [{"type": "response.completed", "response": {"status": "completed"}}]],
    ids=["body_ended", "unreadable_terminal"],
)
@pytest.mark.parametrize(
    ("cut", "said"), [(1, ""), (5, "Firs"), (-1, None)], ids=["no_text", "some_text", "all_but_it"]
)
def test_a_stream_without_its_terminal_event_is_not_completed_however_it_ended(
    cut: int, said: str, tail: list[dict[str, Any]]
) -> None:
    """The adapter says the stream ended normally (``completed=True``: the HTTP body just
    ended, the SDK's iterator stopped) but the terminal event never came (or came without an
    ``output`` list, counted odd): a cut-off reply, not ``completed``, whatever the deltas
    built; the same events with their terminal event are."""
    response = _response([REASONING, MESSAGE])
    events = _events(response)
    folder = ResponsesStreamFolder()
    for event in [*events[:-1][:cut], *tail]:
        folder.feed(event)
    out = folder.outcome(completed=True)
    assert not folder.done and out.completed is False and out.no_reply is None
    assert out.odd == len(tail) and out.finish_reason is None
    doc = response_as_chat(response)
    assert doc is not None
    assert reply_text(out.reply) == (said if said is not None else reply_text(doc["choices"][0]["message"]))
    whole = ResponsesStreamFolder()
    for event in events:
        whole.feed(event)
    assert whole.outcome(completed=True).completed is True


def test_failed_stream_is_not_completed_and_odd_events_are_counted() -> None:
    folder = ResponsesStreamFolder()
    folder.feed({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "Hel"})
    folder.feed({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": 5})
    folder.feed({"no": "type"})
    folder.feed({"type": "response.output_text.delta", "output_index": "x", "content_index": 0, "delta": "y"})
    folder.feed({"type": "response.failed", "response": _response([], status="failed")})
    out = folder.outcome(completed=True)
    assert folder.done and out.completed is False and out.odd == 3 and out.chunks == 5


def _sdk(raw: dict[str, Any]) -> Response:
    """The OpenAI SDK's ``Response`` of ``raw`` (the wrapped client's shape)."""
    usage = {
        **raw["usage"],
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 2},
    }
    return Response.model_validate(
        {**raw, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "usage": usage}
    )


EMPTY_TEXT = {**MESSAGE, "content": [{"type": "output_text", "text": "", "annotations": []}]}
CUT = {"incomplete_details": {"reason": "max_output_tokens"}}


@pytest.mark.parametrize(
    ("status", "output", "extra", "expected"),
    [
        ("failed", [MESSAGE], {"error": {"code": "server_error", "message": "x"}}, NoReply("failed")),
        ("failed", [], {}, NoReply("failed")),
        ("cancelled", [REASONING], {}, NoReply("cancelled")),
        ("incomplete", [REASONING], CUT, NoReply("incomplete")),
        ("incomplete", [REASONING, EMPTY_TEXT], CUT, NoReply("incomplete")),
        ("incomplete", [], {"incomplete_details": {"reason": "content_filter"}}, NoReply("incomplete")),
        ("incomplete", [REASONING, MESSAGE], CUT, "length"),
        ("incomplete", [REASONING, CALL], CUT, "length"),
        ("completed", [], {}, "stop"),
        ([], [], {}, None),  # an odd status reads as before
    ],
)
def test_a_response_finished_without_a_reply_is_no_reply(
    status: Any, output: list[dict[str, Any]], extra: dict[str, Any], expected: Any
) -> None:
    """``finished_as_chat``: ``failed`` and ``cancelled`` (whatever output they kept) and
    ``incomplete`` with no text and no tool call are a ``NoReply`` of that status, the same read
    from the SDK's ``Response``; ``incomplete`` with text or a call stays a chat document
    (finish reason ``length``), as does anything else; ``queued`` / ``in_progress`` are ``None``
    (unfinished: the reply is still to come)."""
    response = _response(output, status=status, **extra)
    reads = [response] if type(status) is not str else [response, _sdk(response)]
    for doc in map(finished_as_chat, reads):
        if isinstance(expected, NoReply):
            assert doc == expected and type(doc) is NoReply
        else:
            assert isinstance(doc, dict) and doc["choices"][0]["finish_reason"] == expected
    for unfinished in ("queued", "in_progress"):
        assert finished_as_chat(_response([], status=unfinished)) is None
    assert finished_as_chat({"object": "chat.completion", "choices": []}) is None


@pytest.mark.parametrize(
    ("terminal", "status", "output", "expected"),
    [
        ("response.failed", "failed", [MESSAGE], "failed"),
        ("response.failed", None, [], "failed"),  # the status the event implies
        ("response.incomplete", "incomplete", [REASONING], "incomplete"),
        ("response.incomplete", "incomplete", [REASONING, MESSAGE], None),
        ("response.completed", "completed", [MESSAGE], None),
    ],
)
def test_a_stream_finished_without_a_reply_says_so(
    terminal: str, status: str | None, output: list[dict[str, Any]], expected: str | None
) -> None:
    """The folder's outcome names the status of a stream whose terminal event carries a response
    without a reply (``no_reply``); one with text, or cut off before its terminal event, none."""
    response = {**_response(output, **CUT), "status": status}
    folder = ResponsesStreamFolder()
    for event in _events(response)[:-1]:
        folder.feed(event)
    assert folder.outcome(completed=False).no_reply is None  # cut off: what the deltas built
    folder.feed({"type": terminal, "response": response})
    out = folder.outcome(completed=True)
    assert folder.done and out.no_reply == expected
    assert out.completed is (terminal != "response.failed")


def test_stream_text_past_the_cap_keeps_nothing() -> None:
    folder = ResponsesStreamFolder(max_chars=10)
    for _ in range(5):
        folder.feed(
            {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "abcd"}
        )
    out = folder.outcome(completed=False)
    assert out.too_large and out.reply["content"] is None


def test_stream_items_are_bounded_and_reasoning_is_not_kept() -> None:
    """A hostile stream: reasoning items are never kept, output items past ``MAX_TOOL_CALLS``
    count as odd, tool-call arguments count toward ``max_chars``."""
    from handoffmon.ingress.chunks import MAX_TOOL_CALLS

    folder = ResponsesStreamFolder()
    folder.feed(
        {"type": "response.output_item.done", "output_index": 0, "item": {**REASONING, "x": "y" * 1000}}
    )
    for i in range(1, MAX_TOOL_CALLS + 11):
        folder.feed(
            {"type": "response.output_item.done", "output_index": i, "item": {**CALL, "call_id": f"c{i}"}}
        )
    out = folder.outcome(completed=False)
    assert len(out.reply["tool_calls"]) == MAX_TOOL_CALLS and out.odd == 10
    big = ResponsesStreamFolder(max_chars=100)
    big.feed(
        {"type": "response.output_item.done", "output_index": 0, "item": {**CALL, "arguments": "x" * 101}}
    )
    assert big.outcome(completed=False).too_large


def test_a_conversation_can_switch_api_and_still_attribute() -> None:
    """A chat reply sent back as Responses input items, and a Responses reply sent back as a
    chat message, normalize to the message that was recorded (ADR 0010)."""
    chat_reply = {
        "role": "assistant",
        "content": "Looking it up.",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
        ],
    }
    echoed = read_request(
        {
            "model": "m",
            "input": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "Looking it up."},
                {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": '{"q":"x"}'},
            ],
        }
    ).doc
    assert echoed is not None and normalize_message(echoed["messages"][1]) == normalize_message(chat_reply)
    doc = response_as_chat(_response([REASONING, {**MESSAGE, "content": MESSAGE["content"][:1]}, CALL]))
    assert doc is not None
    as_chat = {
        "role": "assistant",
        "content": "First part.",
        "tool_calls": [dict(chat_reply["tool_calls"][0])],
    }
    assert normalize_message(as_chat) == normalize_message(doc["choices"][0]["message"])


_json = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-3, 3),
        st.floats(allow_nan=True),
        st.text(max_size=6),
        st.sampled_from(_TYPES),
    ),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.sampled_from(_KEYS), kids, max_size=5),
    max_leaves=20,
)


_dicts = st.dictionaries(st.sampled_from(_KEYS), _json, max_size=5)
"""Item-, part- and event-shaped objects: the API's keys, anything as their values."""


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    body=st.one_of(
        _json,
        st.fixed_dictionaries(
            {"input": st.lists(_dicts, max_size=5)},
            optional={
                "x": _json,
                "previous_response_id": st.one_of(_json, st.just("resp_1")),
                "conversation": st.one_of(_json, st.just("conv_1"), st.fixed_dictionaries({"id": _json})),
                "store": _json,
            },
        ),
    ),
    response=st.one_of(_json, st.fixed_dictionaries({"output": st.lists(_dicts, max_size=4)})),
    events=st.lists(st.one_of(_json, _dicts), max_size=6),
)
@example(body={"input": [{"type": [1]}]}, response={"output": [{"type": {}}]}, events=[{"type": ["x"]}])
@example(
    body={"input": [{"role": "user", "content": [{"type": [1]}]}]},
    response={"output": [{"type": "message", "role": "assistant", "content": [{"type": {}}]}]},
    events=[],
)
@pytest.mark.slow
def test_the_readers_are_total(body: Any, response: Any, events: list[Any]) -> None:
    """Whatever a client or an upstream sends (any JSON, with the API's own keys in odd
    places): nothing raises, and every result has the shape its caller relies on."""
    got = read_request(body)
    assert (got.doc is None) != (got.skip is None)
    if got.doc is not None:
        assert all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in got.doc["messages"])
    if got.link is not None:  # what the attributor is handed: strings or None, bounded ids
        assert got.link.previous is None or (isinstance(got.link.previous, str) and got.link.previous)
        conv = got.link.conversation
        assert conv is None or (isinstance(conv, str) and 0 < len(conv) <= 256)
        assert not (got.link.previous and conv) and isinstance(got.link.keep, bool)
    doc = response_as_chat(response)
    assert doc is None or (len(doc["choices"]) == 1 and doc["choices"][0]["message"]["role"] == "assistant")
    folder = ResponsesStreamFolder(max_chars=50)
    for event in events:
        folder.feed(event)
    out = folder.outcome(completed=True)
    assert out.chunks == len(events) and out.reply["role"] == "assistant"


def test_a_reply_of_several_parts_sent_back_as_the_sdks_output_text_is_attributed() -> None:
    """An application that keeps ``response.output_text`` (the SDK joins the text parts with
    nothing between them) and sends it back as the assistant message: the reply is found by
    chain, not ``unknown`` (the parts read as history join with a space)."""
    from handoffmon.attribution import Attributor
    from handoffmon.stores.memory import MemoryStore

    attributor = Attributor(MemoryStore())
    first = read_request({"model": "m", "input": "hi", "store": False}).doc
    assert first is not None
    ctx = attributor.attribute(first["messages"])
    doc = response_as_chat(_response([REASONING, MESSAGE]))
    assert doc is not None
    attributor.persist(attributor.record(ctx, doc["choices"][0]["message"], ["gpt-x"]))
    raw = _response([REASONING, MESSAGE], parallel_tool_calls=True, tool_choice="auto", tools=[])
    raw["usage"] = {
        **raw["usage"],
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 2},
    }
    output_text = Response.model_validate(raw).output_text
    assert output_text == "First part.Second  part."
    for sent in ([MESSAGE], [{"role": "assistant", "content": output_text}]):
        body = {"model": "m", "input": [{"role": "user", "content": "hi"}, *sent, "more"], "store": False}
        nxt = read_request(body).doc
        assert nxt is not None
        ctx = attributor.attribute(nxt["messages"])
        assert [(a.author, a.method) for a in ctx.attributions] == [("gpt-x", "chain")]
