"""SSEChunks: serve's SSE framing feeds the shared chunk folder, however the bytes are split."""

from __future__ import annotations

import json

from handoffmon.ingress.sse import SSEChunks


def _events(*chunks: dict) -> bytes:  # type: ignore[type-arg]
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


STREAM = _events(
    {"model": "m-1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
    {"model": "m-1", "choices": [{"index": 0, "delta": {"content": "Hé"}}]},
    {
        "model": "m-1",
        "choices": [{"index": 0, "delta": {"content": "llo"}}, {"index": 1, "delta": {"content": "X"}}],
    },
    {"model": "m-1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    {"model": "m-1", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}},
)


def test_every_split_point_gives_the_same_reply() -> None:
    """Splitting the byte stream at any offset (even inside UTF-8) yields the same message."""
    for cut in range(len(STREAM) + 1):
        acc = SSEChunks()
        acc.feed(STREAM[:cut])
        acc.feed(STREAM[cut:])
        acc.close()
        out = acc.outcome(completed=True)
        assert out.reply == {"role": "assistant", "content": "Héllo"}, cut
        assert (out.finish_reason, out.response_model, acc.done) == ("stop", "m-1", True)
        assert (out.input_tokens, out.output_tokens, out.odd) == (7, 2, 0)


def test_crlf_line_endings_and_missing_final_blank_line() -> None:
    """CRLF-delimited events and a last event without a trailing blank line are still read."""
    raw = STREAM.replace(b"\n", b"\r\n").rstrip(b"\r\n")
    acc = SSEChunks()
    for i in range(0, len(raw), 7):
        acc.feed(raw[i : i + 7])
    acc.close()
    assert acc.outcome(completed=True).reply["content"] == "Héllo" and acc.done


def test_tool_call_deltas_are_merged_by_index() -> None:
    """Streamed tool calls become the same tool_calls list a JSON response carries."""
    raw = _events(
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "get", "arguments": ""},
                            }
                        ],
                    },
                }
            ]
        },
        {
            "choices": [
                {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]}}
            ]
        },
        {
            "choices": [
                {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": " 1}"}}]}}
            ]
        },
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    )
    acc = SSEChunks()
    acc.feed(raw)
    out = acc.outcome(completed=True)
    assert out.reply == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get", "arguments": '{"a": 1}'}}
        ],
    }
    assert out.finish_reason == "tool_calls"


def test_garbage_events_are_counted_not_raised() -> None:
    """Non-JSON data lines and comments are skipped; bad ones counted."""
    acc = SSEChunks()
    acc.feed(
        b': keep-alive\n\ndata: {not json\n\nevent: x\ndata: {"choices": [{"delta": {"content": "ok"}}]}\n\n'
    )
    out = acc.outcome(completed=True)
    assert acc.bad_events == 1 and out.odd == 1 and out.reply["content"] == "ok"


def test_text_holding_a_lone_surrogate_folds_as_its_json_escape() -> None:
    """``SSEFolder`` takes a stream's text as well as its bytes; text that is not UTF-8 (a lone
    surrogate) made ``feed`` raise. It now folds as the same event sent as bytes with the JSON
    escape ``\\ud800`` does."""
    from handoffmon.ingress.chunks import ChunkFolder
    from handoffmon.ingress.sse import SSEFolder

    as_text, as_bytes = SSEFolder(ChunkFolder()), SSEFolder(ChunkFolder())
    as_text.feed('data: {"choices": [{"index": 0, "delta": {"content": "\ud800"}}]}\n\n')
    as_bytes.feed(b'data: {"choices": [{"index": 0, "delta": {"content": "\\ud800"}}]}\n\n')
    for folder in (as_text, as_bytes):
        folder.feed('data: {"choices": [{"index": 0, "delta": {"content": "ok"}}]}\n\n')
    assert as_text.outcome(completed=True) == as_bytes.outcome(completed=True)
    assert as_text.outcome(completed=True).reply["content"] == "\ud800ok"
