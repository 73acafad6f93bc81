"""``serve`` at the edges of the wire formats: event streams with CRLF, comments, ``retry:``
fields and multi-line ``data:``, read however the bytes are split, at a cost linear in the
bytes (the parse runs on the serving loop)."""

from __future__ import annotations

import json
import time
from typing import Any

from handoffmon.ingress.sse import SSEChunks

BASE = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def _chunk(**delta: Any) -> dict[str, Any]:
    return {**BASE, "choices": [{"index": 0, "delta": delta}]}


def _fed(data: bytes, size: int) -> tuple[SSEChunks, float]:
    sse = SSEChunks(max_chars=16 << 20)
    start = time.process_time()
    for i in range(0, len(data), size):
        sse.feed(data[i : i + size])
    return sse, time.process_time() - start


def test_a_large_event_in_small_reads_costs_about_what_it_costs_whole() -> None:
    """A 0.9 MB event (one tool call's arguments, well inside the monitored cap) arriving in
    TCP-segment-sized reads is parsed in time linear in its bytes: the parse runs on the
    serving loop, so rescanning the whole buffer on every read (0.65 s for this event in
    1,460-byte reads) would stall every other request."""
    args = "x" * 900_000
    call = {"index": 0, "id": "t", "type": "function", "function": {"name": "f", "arguments": args}}
    data = f"data: {json.dumps(_chunk(tool_calls=[call]))}\n\ndata: [DONE]\n\n".encode()
    whole, t_whole = _fed(data, len(data))
    pieces, t_pieces = _fed(data, 512)
    assert pieces.done and pieces.events == whole.events == 1
    assert pieces.outcome(completed=True).reply == whole.outcome(completed=True).reply
    assert pieces.outcome(completed=True).reply["tool_calls"][0]["function"]["arguments"] == args
    assert t_pieces < 5 * t_whole + 0.05, (t_pieces, t_whole)


def test_crlf_comments_retry_and_multiline_data_fold_alike_at_every_split() -> None:
    """CRLF line endings, ``: ping`` comments, ``retry:``/``event:``/``id:`` fields and a
    ``data:`` split over two lines fold to the same reply wherever the bytes are cut
    (including between the CR and the LF)."""
    first = json.dumps(_chunk(role="assistant", content="Hel"))
    second = json.dumps(_chunk(content="lo, wörld"))
    half = second.index(", ") + 1  # a JSON producer splits between tokens: joined by LF
    data = (
        f": ping\r\nretry: 3000\r\n\r\nevent: message\r\nid: 1\r\ndata: {first}\r\n\r\n"
        f": keep-alive\r\n\r\ndata: {second[:half]}\r\ndata: {second[half:]}\r\n\r\n"
        "data: [DONE]\r\n\r\n"
    ).encode()
    whole, _ = _fed(data, len(data))
    assert whole.done and whole.events == 2 and whole.bad_events == 0
    assert whole.outcome(completed=True).reply["content"] == "Hello, wörld"
    for cut in range(1, len(data)):
        sse = SSEChunks()
        sse.feed(data[:cut])
        sse.feed(data[cut:])
        assert (sse.done, sse.events, sse.bad_events) == (True, 2, 0), cut
        assert sse.outcome(completed=True).reply == whole.outcome(completed=True).reply, cut
    each, _ = _fed(data, 1)
    assert each.outcome(completed=True).reply == whole.outcome(completed=True).reply
