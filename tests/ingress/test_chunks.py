"""ChunkFolder: OpenAI streaming semantics, and total — no chunk shape makes it raise."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import httpx
import openai
from hypothesis import given, settings
from hypothesis import strategies as st

from handoffmon.ingress import ChunkFolder


def _fold(*chunks: Any) -> Any:
    folder = ChunkFolder()
    for c in chunks:
        folder.feed(c)
    return folder.outcome(completed=True)


def _delta(delta: Any, index: Any = 0, **choice: Any) -> dict[str, Any]:
    return {"choices": [{"index": index, "delta": delta, **choice}]}


def test_tool_calls_fold_by_index_name_once_arguments_appended() -> None:
    """Two parallel tool calls interleaved: each keeps its id and name; arguments join in order."""
    out = _fold(
        _delta(
            {
                "tool_calls": [
                    {"index": 0, "id": "a", "type": "function", "function": {"name": "f", "arguments": ""}}
                ]
            }
        ),
        _delta(
            {
                "tool_calls": [
                    {"index": 1, "id": "b", "type": "function", "function": {"name": "g", "arguments": "["}}
                ]
            }
        ),
        _delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"x":'}}]}),
        _delta({"tool_calls": [{"index": 1, "function": {"name": "g", "arguments": "1]"}}]}),
        _delta({"tool_calls": [{"index": 0, "function": {"arguments": " 1}"}}]}),
    )
    assert out.reply["content"] is None
    assert [
        (c["id"], c["function"]["name"], c["function"]["arguments"]) for c in out.reply["tool_calls"]
    ] == [
        ("a", "f", '{"x": 1}'),
        ("b", "g", "[1]"),
    ]
    assert out.odd == 0


def test_other_choices_fold_by_index_beside_the_reply() -> None:
    """``n > 1``: each choice folds into its own message (text, tool calls, refusal) while the
    reply, its finish reason and deployments stay choice 0's; indexes past MAX_ALTERNATIVES are
    skipped without counting odd; the cap counts every choice's text."""
    from handoffmon.ingress.chunks import MAX_ALTERNATIVES

    call = {"index": 0, "id": "c", "type": "function", "function": {"name": "f", "arguments": "{"}}
    both = [{"index": 0, "delta": {"content": "a"}}, {"index": 1, "delta": {"content": "X"}}]
    out = _fold(
        {"choices": both, "_hidden_params": {"model_id": "dep-a"}},
        {"choices": [{"index": 2, "delta": {"tool_calls": [call]}}]},
        {"choices": [{"index": 1, "delta": {"content": "Y"}, "finish_reason": "length"}]},
        {"choices": [{"index": 0, "delta": {"content": "b"}}]},
        {"choices": [{"index": 2, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}}]},
        {"choices": [{"index": 3, "delta": {"refusal": "no"}}]},
        {"choices": [{"index": MAX_ALTERNATIVES + 1, "delta": {"content": "dropped"}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    )
    assert out.reply == {"role": "assistant", "content": "ab"} and out.odd == 0
    assert (out.finish_reason, out.deployment_ids) == ("stop", ("dep-a",))
    assert out.alternatives == (
        {"role": "assistant", "content": "XY"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "assistant", "content": None, "refusal": "no"},
    )
    capped = ChunkFolder(max_chars=4)
    capped.feed(_delta({"content": "ab"}))
    capped.feed(_delta({"content": "cde"}, index=1))
    out = capped.outcome(completed=True)
    assert out.too_large and out.reply["content"] is None and out.alternatives[0]["content"] is None


def test_content_parts_usage_id_model_and_finish_reason() -> None:
    """List-of-parts deltas give their text; usage, id, model and finish reason are kept."""
    out = _fold(
        {
            "id": "c-1",
            "model": "m",
            "choices": [{"index": 0, "delta": {"content": [{"type": "text", "text": "hi"}]}}],
        },
        {"choices": [{"index": 0, "delta": {"content": [{"type": "image_url", "image_url": {}}, " there"]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}},
    )
    assert out.reply["content"] == "hi there"
    assert (out.response_id, out.response_model, out.finish_reason) == ("c-1", "m", "length")
    assert (out.input_tokens, out.output_tokens, out.chunks, out.odd) == (5, 2, 4, 0)


def test_odd_chunks_are_skipped_and_counted() -> None:
    """index null, "x" or negative, tool_calls: 5, choices: 1, non-dict deltas/chunks: skipped and counted."""
    odd = [
        _delta({"tool_calls": [{"index": None, "function": {"name": "f"}}]}),
        _delta({"tool_calls": [{"index": "x", "function": {"arguments": "{}"}}]}),
        _delta({"tool_calls": [{"index": -1, "function": {"arguments": "{}"}}]}),
        _delta({"tool_calls": 5}),
        {"choices": 1},
        {"choices": [1]},
        _delta("text"),
        _delta({"content": 42}),
        _delta({"tool_calls": [{"index": 0, "function": {"arguments": 7}}]}),
        _delta({"content": "x"}, index="0"),
        "data: not a chunk",
        None,
    ]
    out = _fold(_delta({"content": "ok"}), *odd)
    assert out.reply == {
        "role": "assistant",
        "content": "ok",
        "tool_calls": [{"id": "", "type": "function", "function": {"name": "", "arguments": ""}}],
    }
    assert out.odd == len(odd) and out.chunks == len(odd) + 1


def test_tool_call_slots_are_bounded() -> None:
    """A stream naming thousands of tool-call indexes keeps at most MAX_TOOL_CALLS of them."""
    from handoffmon.ingress.chunks import MAX_TOOL_CALLS

    chunks = [
        _delta({"tool_calls": [{"index": i, "function": {"arguments": "x"}}]})
        for i in range(MAX_TOOL_CALLS + 50)
    ]
    out = _fold(*chunks)
    assert len(out.reply["tool_calls"]) == MAX_TOOL_CALLS and out.odd == 50


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "choices",
                    "delta",
                    "index",
                    "tool_calls",
                    "function",
                    "name",
                    "arguments",
                    "content",
                    "usage",
                    "id",
                    "model",
                    "role",
                    "type",
                    "text",
                    "finish_reason",
                    "_hidden_params",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(JSON, max_size=6))
def test_folder_is_total(chunks: list[Any]) -> None:
    """Whatever JSON a stream carries, feed() and outcome() never raise."""
    out = _fold(*chunks)
    assert out.chunks == len(chunks) and 0 <= out.odd <= len(chunks)
    assert out.reply["role"] is not None


def test_a_reply_past_max_chars_keeps_nothing_and_is_too_large() -> None:
    """Text and tool-call arguments count toward the cap; the piece that passes it drops all
    that was kept, later pieces are not kept, and the rest of the stream is still read."""
    folder = ChunkFolder(max_chars=10)
    folder.feed(_delta({"role": "assistant", "content": "12345"}))
    call = {"index": 0, "id": "c", "type": "function", "function": {"name": "f", "arguments": "1234"}}
    folder.feed(_delta({"tool_calls": [call]}))
    assert folder.outcome(completed=False).too_large is False  # 9 characters: within
    folder.feed(_delta({"content": "67"}))  # 11: past the cap
    folder.feed(_delta({"content": "more"}))
    folder.feed(
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": {"completion_tokens": 9}}
    )
    out = folder.outcome(completed=True)
    assert out.too_large is True and out.reply["content"] is None
    assert [c["function"]["arguments"] for c in out.reply["tool_calls"]] == [""]
    assert (out.finish_reason, out.output_tokens, out.chunks, out.odd) == ("stop", 9, 5, 0)


def test_an_endless_stream_holds_bounded_memory() -> None:
    """100 MiB of streamed text through a 1 MiB cap: the folder's allocations stay near the cap."""
    import tracemalloc

    tracemalloc.start()
    try:
        folder = ChunkFolder(max_chars=1 << 20)
        for i in range(1600):
            folder.feed(_delta({"content": "x" * 65535 + str(i % 10)}))  # a new 64 KiB string each
        out = folder.outcome(completed=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.too_large and out.chunks == 1600
    assert peak < 4 << 20, peak  # the cap's 1 MiB of pieces plus chunk dicts; 100 MiB unbounded


def test_refusal_pieces_fold_into_refusal() -> None:
    """Structured outputs stream a refusal in ``delta.refusal`` (content stays null)."""
    out = _fold(
        _delta({"role": "assistant", "content": None, "refusal": ""}),
        _delta({"refusal": "I can't "}),
        _delta({"refusal": "help with that."}),
        _delta({}, finish_reason="stop"),
    )
    assert out.reply == {"role": "assistant", "content": None, "refusal": "I can't help with that."}
    assert out.odd == 0
    assert _fold(_delta({"refusal": 5})).odd == 1


def test_deployments_credited_are_bounded_and_keep_the_latest() -> None:
    """A stream whose chunks alternate deployments credited the turn to one more author per
    switch (200,000 for 200,000 chunks, each a stored name). At most MAX_DEPLOYMENTS are kept:
    the first ones and the one that produced the latest content, never two alike in a row."""
    from handoffmon.ingress.chunks import MAX_DEPLOYMENTS

    def chunk(dep: str) -> dict[str, Any]:
        return {**_delta({"content": "x"}), "_hidden_params": {"model_id": dep}}

    out = _fold(*(chunk(f"d{i % 2}") for i in range(10_000)), chunk("d-last"))
    ids = out.deployment_ids
    assert len(ids) == MAX_DEPLOYMENTS and ids[:3] == ("d0", "d1", "d0") and ids[-1] == "d-last"
    assert all(a != b for a, b in pairwise(ids))
    assert _fold(chunk("a"), chunk("b"), chunk("b")).deployment_ids == ("a", "b")


_ERROR = {"error": {"message": "overloaded", "type": "server_error"}}


def _folded(chunks: list[Any], exc: BaseException | None = None) -> Any:
    folder = ChunkFolder()
    for c in chunks:
        folder.feed(c)
    if exc is not None:
        folder.raised(exc)
    return folder.outcome(completed=False)


def test_an_upstream_error_before_anything_said_is_no_reply_after_it_a_cut_off_reply() -> None:
    """The upstream's error (an error chunk, or the SDK's exception for one) ends a chat stream
    as it ends a Responses or Messages stream: before any text, tool call or refusal of any
    choice it is no reply (``error``); after one, the reply so far is kept, cut off."""
    role = _delta({"role": "assistant", "content": ""})
    api_error = openai.APIError(
        "overloaded", httpx.Request("POST", "http://u/v1/chat/completions"), body=_ERROR
    )
    assert _folded([role, _ERROR]).no_reply == "error"
    assert _folded([role], api_error).no_reply == "error"
    said = {
        "text": _delta({"content": "Hi"}),
        "refusal": _delta({"refusal": "I can't"}),
        "tool_call": _delta(
            {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": ""}}]}
        ),
        "another_choice": _delta({"content": "Hi"}, index=1),
    }
    for name, chunk in said.items():
        out = _folded([role, chunk, _ERROR])
        assert out.no_reply is None, name
    assert _folded([role, said["refusal"], _ERROR]).reply["refusal"] == "I can't"
    # a dropped connection is not the upstream's answer: cut off, an empty turn as before
    dropped = openai.APIConnectionError(request=httpx.Request("POST", "http://u/v1/chat/completions"))
    assert _folded([role], dropped).no_reply is None
    assert _folded([role], RuntimeError("consumer")).no_reply is None
    # a reply past the cap kept nothing, so nothing says it was silent: counted too_large instead
    folder = ChunkFolder(max_chars=3)
    folder.feed(_delta({"content": "too long"}))
    folder.feed(_ERROR)
    out = folder.outcome(completed=False)
    assert (out.too_large, out.no_reply) == (True, None)
