"""``serve`` at the edges of the wire formats: event streams with CRLF, comments, ``retry:``
fields and multi-line ``data:``, read however the bytes are split, at a cost linear in the
bytes (the parse runs on the serving loop)."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from handoffmon.ingress.sse import SSEChunks
from tests.proxy.conftest import Proxy, proxy_config, running_proxy
from tests.proxy.scripted_upstream import Script, ScriptedUpstream, sse

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
    """CRLF (and lone CR) line endings, ``: ping`` comments, ``retry:``/``event:``/``id:`` fields and a
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
    # a lone CR ends a line too (the SSE format's third line ending)
    lone_cr, _ = _fed(data.replace(b"\r\n", b"\r"), 1)
    assert (lone_cr.done, lone_cr.events, lone_cr.bad_events) == (True, 2, 0)
    assert lone_cr.outcome(completed=True).reply == whole.outcome(completed=True).reply


OK_REPLY = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


class RawUpstream:
    """An HTTP/1.1 upstream on a bare socket: it records each request's head and body as they
    came over the wire and answers with ``reply`` bytes (what uvicorn would not let an app
    send: a 304 with a ``content-length``; no ``100 Continue`` for an ``expect``)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.seen: list[tuple[bytes, bytes]] = []
        self.reply = OK_REPLY
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        with conn, contextlib.suppress(OSError):
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = re.search(rb"(?im)^content-length: *(\d+)", head)
                n = int(length.group(1)) if length else 0
                while len(buf) < n:
                    buf += conn.recv(65536)
                self.seen.append((head, buf[:n]))
                buf = buf[n:]
                conn.sendall(self.reply)


@pytest.fixture(scope="module")
def raw_proxy() -> Iterator[tuple[RawUpstream, Proxy]]:
    up = RawUpstream()
    cfg = proxy_config(up.url, proxy={"client_timeout_s": 0.5, "upstream_timeout_s": 5})
    with running_proxy(cfg) as p:
        yield up, p
    up.sock.close()


def _exchange(url: str, *writes: bytes | float, timeout_s: float = 5) -> tuple[bytes, float]:
    """Write raw bytes to ``url`` (a float: a pause), read until the server closes (or resets:
    a server that answers before reading the whole request and closes sends a reset for the
    unread bytes, which can arrive after its answer) or ``timeout_s``; the bytes read and the
    seconds it took."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port))) as s:
        s.settimeout(timeout_s)
        start = time.monotonic()
        for w in writes:
            if isinstance(w, float):
                time.sleep(w)
            else:
                s.sendall(w)
        out = b""
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            while data := s.recv(65536):
                out += data
        return out, time.monotonic() - start


CHAT_BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()


def _post(extra: bytes = b"", body: bytes = CHAT_BODY) -> bytes:
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n%s\r\n%s" % (len(body), extra, body)
    )


def test_an_expect_100_continue_is_answered_by_serve_and_not_forwarded(
    raw_proxy: tuple[RawUpstream, Proxy],
) -> None:
    """``curl`` sends ``expect: 100-continue`` with large bodies. serve answers it (uvicorn's
    ``100 Continue``) and reads the body; forwarding the expectation made the upstream client
    wait for a second ``100 Continue``, and an upstream that waits for the body instead (RFC
    9110 allows it) left the request hanging until ``proxy.upstream_timeout_s`` (then a 504)."""
    up, proxy = raw_proxy
    head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n" % len(CHAT_BODY)
    out, took = _exchange(
        proxy.url, head + b"expect: 100-continue\r\nconnection: close\r\n\r\n", 0.2, CHAT_BODY
    )
    assert out.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n"), out
    assert out.endswith(b"\r\n\r\n{}") and took < 2, (out, took)
    head_seen, body_seen = up.seen[-1]
    assert b"expect" not in head_seen.lower() and body_seen == CHAT_BODY


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/files/file-1/content"])
def test_a_304_with_a_content_length_is_passed_without_breaking_the_connection(
    raw_proxy: tuple[RawUpstream, Proxy], path: str
) -> None:
    """A 304 may carry the ``content-length`` its 200 would have (RFC 9110 §8.6) and has no
    body. uvicorn took the header as a promise of body bytes: the response raised in serve
    and the client's keep-alive connection was dropped. Now the client gets the 304 (its
    other headers unchanged), and the same connection serves the next request."""
    up, proxy = raw_proxy
    up.reply = b'HTTP/1.1 304 Not Modified\r\netag: "v1"\r\ncontent-length: 10\r\n\r\n'
    try:
        method = b"POST" if "chat" in path else b"GET"
        first = _post() if method == b"POST" else b"GET %s HTTP/1.1\r\nhost: x\r\n\r\n" % path.encode()
        out, _ = _exchange(
            proxy.url, first, 0.3, b"GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
        )
    finally:
        up.reply = OK_REPLY
    assert out.startswith(b'HTTP/1.1 304 Not Modified\r\netag: "v1"\r\n\r\n'), out
    assert out.count(b"HTTP/1.1 304 Not Modified") == 2, out  # the second answered on the same connection


def test_a_chunked_body_s_trailer_is_not_forwarded_as_a_header(raw_proxy: tuple[RawUpstream, Proxy]) -> None:
    """Trailer fields of a chunked request body are not header fields (RFC 9110 §6.5.2):
    uvicorn appended them to the request's headers, so serve sent them upstream as headers
    (here ``authorization``, which a direct call would not have sent as one)."""
    up, proxy = raw_proxy
    body = b"%x\r\n%s\r\n0\r\nauthorization: Bearer trailer\r\nx-late: 1\r\n\r\n" % (
        len(CHAT_BODY),
        CHAT_BODY,
    )
    head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n"
    out, _ = _exchange(proxy.url, head + b"connection: close\r\n\r\n" + body)
    assert out.startswith(b"HTTP/1.1 200 OK") and out.endswith(b"{}"), out
    head_seen, body_seen = up.seen[-1]
    assert body_seen == CHAT_BODY
    assert b"authorization" not in head_seen.lower() and b"x-late" not in head_seen.lower(), head_seen


def test_a_pipelined_head_that_stalls_is_refused_after_the_client_timeout(
    raw_proxy: tuple[RawUpstream, Proxy],
) -> None:
    """A complete request and the start of a second in one write, then nothing: the second
    head began without a read of its own, so no clock started for it and the connection
    stayed open until uvicorn's keep-alive timeout (75 s), past ``proxy.client_timeout_s``
    (0.5 s here). Now the first is answered and the stalled second gets a 408."""
    _, proxy = raw_proxy
    out, took = _exchange(proxy.url, _post() + b"POST /v1/chat/completions HTTP/1.1\r\nhost:", timeout_s=5)
    assert out.startswith(b"HTTP/1.1 200 OK") and b"{}HTTP/1.1 408 Request Timeout\r\n" in out, out
    assert took < 3, took


def test_a_malformed_chunked_body_read_with_its_head_is_a_400_not_a_431(
    raw_proxy: tuple[RawUpstream, Proxy],
) -> None:
    """Body bytes read together with a small head counted as head bytes: a chunked body that
    is malformed was answered ``431 Request Header Fields Too Large``, which sends its author
    looking at the wrong thing."""
    _, proxy = raw_proxy
    head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
    out, _ = _exchange(proxy.url, head + b"5\r\nhello\r\nZZ\r\n" + b"a" * 100_000)
    assert out.startswith(b"HTTP/1.1 400 Bad Request\r\n"), out[:200]


@pytest.fixture(scope="module")
def scripted_proxy(scripted: tuple[ScriptedUpstream, str]) -> Iterator[tuple[ScriptedUpstream, str, Proxy]]:
    cfg = proxy_config(scripted[1], proxy={"max_monitored_reply_bytes": 8 << 20, "client_timeout_s": 0.5})
    with running_proxy(cfg) as p:
        yield scripted[0], scripted[1], p


def test_one_event_past_the_framing_buffer_is_not_recorded_as_a_shorter_reply(
    scripted_proxy: tuple[ScriptedUpstream, str, Proxy],
) -> None:
    """One 1.5 MB event (an upstream that sends a long answer as a single chunk) inside the
    monitored cap (8 MiB here) but past the SSE framing buffer (1 MiB): the client gets every
    byte; the event cannot be read, so the turn is counted ``too_large``, never recorded with
    the text of the other events only (a reply the client did not get)."""
    app, url, proxy = scripted_proxy
    big = "z" * 1_500_000
    pieces = sse(_chunk(role="assistant", content="Start. "), _chunk(content=big), _chunk(content=" End."))
    # as an upstream's socket delivers it: in reads of 64 KiB
    data = b"".join(p for p in pieces if isinstance(p, bytes))
    sid = app.add(Script([data[i : i + 65536] for i in range(0, len(data), 65536)]))
    assert proxy.monitor.flush(10)
    turns = int(proxy.monitor.snapshot().total_turns)
    labels = {"reason": "too_large"}
    large = proxy.registry.get_sample_value("handoffmon_proxy_unmonitored_requests_total", labels) or 0.0
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(timeout=30) as c:
        direct = c.post(f"{url}/v1/chat/completions", json=body, headers={"x-script": sid})
        proxied = c.post(f"{proxy.url}/v1/chat/completions", json=body, headers={"x-script": sid})
    assert proxied.status_code == 200 and proxied.content == direct.content == data
    assert proxy.monitor.flush(10)
    assert int(proxy.monitor.snapshot().total_turns) == turns
    after = proxy.registry.get_sample_value("handoffmon_proxy_unmonitored_requests_total", labels)
    assert after == large + 1


def test_a_pipelined_head_stalling_during_a_stream_is_refused_after_the_stream_not_inside_it(
    scripted_proxy: tuple[ScriptedUpstream, str, Proxy],
) -> None:
    """A client pipelines the start of its next request while a 1.5 s stream is still going
    out (``proxy.client_timeout_s`` 0.5 s here) and never finishes it: the 408 comes after
    the stream's last byte, never written into the middle of the event stream."""
    app, _, proxy = scripted_proxy
    a, b, c, done = sse(_chunk(role="assistant", content="a"), _chunk(content="b"), _chunk(content="c"))
    pieces: list[bytes | float] = [a, 0.5, b, 0.5, c, 0.5, done]
    sid = app.add(Script(pieces))
    stream = b"".join(p for p in pieces if isinstance(p, bytes))
    body = json.dumps(
        {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    ).encode()
    first = _post(b"x-script: %s\r\n" % sid.encode(), body)
    out, took = _exchange(proxy.url, first, 0.2, b"POST /v1/chat/completions HTTP/1.1\r\nhost:", timeout_s=6)
    head, _, rest = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK"), out[:300]
    chunked, sep, after = rest.partition(b"0\r\n\r\n")
    assert sep and after.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), out
    decoded, cursor = b"", chunked
    while cursor:
        size, _, cursor = cursor.partition(b"\r\n")
        decoded, cursor = decoded + cursor[: int(size, 16)], cursor[int(size, 16) + 2 :]
    assert decoded == stream
    assert took < 4, took
