"""``serve`` under traffic a direct call handles: large uploads, large replies, large upstream
headers, more streams than the upstream pool, WebSocket handshakes, dot-segment paths, and tiny
stream deltas. Each is forwarded as a direct call would be, or refused clearly and counted, and
none makes ``serve`` hold more than a bounded amount per request."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import logging
import os
import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import aiohttp
import httpx
import pytest

from handoffmon.ingress.chunks import ChunkFolder
from tests.proxy.conftest import Proxy, Upstream, proxy_config, running_proxy
from tests.proxy.scripted_upstream import Script, ScriptedUpstream, sse

CHAT = "/v1/chat/completions"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
BASE = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
CAP = 1 << 20  # proxy.max_monitored_reply_bytes here


def chunk(**delta: Any) -> dict[str, Any]:
    return {**BASE, "choices": [{"index": 0, "delta": delta}]}


@pytest.fixture(scope="module")
def proxy(scripted: tuple[ScriptedUpstream, str]) -> Iterator[Proxy]:
    cfg = proxy_config(
        scripted[1],
        proxy={
            "client_timeout_s": 0.5,
            "body_timeout_s": 1.5,
            "max_body_bytes": CAP,
            "max_monitored_reply_bytes": CAP,
            "max_upstream_requests": 2,
            "upstream_queue_timeout_s": 0.5,
        },
        pipeline={"max_queued_bytes": 4 * CAP},
    )
    with running_proxy(cfg) as p:
        yield p


def _sample(proxy: Proxy, name: str, labels: dict[str, str] | None = None) -> float:
    assert proxy.monitor.flush(30)
    return proxy.registry.get_sample_value(name, labels or {}) or 0.0


def _turns(proxy: Proxy) -> int:
    assert proxy.monitor.flush(10)
    return int(proxy.monitor.snapshot().total_turns)


def test_an_upload_larger_than_the_body_limit_streams_to_a_forwarded_path(
    scripted: tuple[ScriptedUpstream, str], proxy: Proxy
) -> None:
    """A 5 MiB file upload (5x ``max_body_bytes``) to a path serve only forwards reaches the
    upstream byte for byte, with its Content-Length, and the answer comes back; so does a
    chunked upload. The limit still holds for the monitored APIs (413)."""
    app, _ = scripted
    sid = app.add(Script([b'{"id": "file-1"}'], headers=[(b"content-type", b"application/json")]))
    data = os.urandom(5 * CAP)
    with httpx.Client(timeout=30) as c:
        r = c.post(f"{proxy.url}/v1/files", content=data, headers={"x-script": sid})
        assert r.status_code == 200 and r.json() == {"id": "file-1"}
        assert app.received[-1] == (len(data), hashlib.sha256(data).hexdigest())
        assert dict(app.seen[-1])[b"content-length"] == str(len(data)).encode()

        def pieces() -> Iterator[bytes]:
            for i in range(0, len(data), 256 * 1024):
                yield data[i : i + 256 * 1024]

        r = c.post(f"{proxy.url}/v1/uploads/u1/parts", content=pieces(), headers={"x-script": sid})
        assert r.status_code == 200
        assert app.received[-1] == (len(data), hashlib.sha256(data).hexdigest())
        r = c.post(f"{proxy.url}{CHAT}", content=data, headers={"x-script": sid})
        assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"


def test_an_upload_that_stalls_is_answered_408_and_one_abandoned_is_counted(
    scripted: tuple[ScriptedUpstream, str], proxy: Proxy
) -> None:
    app, _ = scripted
    sid = app.add(Script([b"{}"], headers=[(b"content-type", b"application/json")]))
    port = int(proxy.url.rsplit(":", 1)[1])
    head = (
        f"POST /v1/files HTTP/1.1\r\nHost: x\r\nx-script: {sid}\r\nContent-Length: 100000\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(head + b"x" * 70000)
        time.sleep(1.2)  # past client_timeout_s inside the body
        answer = s.recv(65536)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
    assert b"client_timeout" in answer
    before = _sample(proxy, "handoffmon_proxy_client_disconnects_total")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(head + b"x" * 70000)
        time.sleep(0.1)
    deadline = time.monotonic() + 5
    while _sample(proxy, "handoffmon_proxy_client_disconnects_total") < before + 1:
        assert time.monotonic() < deadline, "the abandoned upload was not counted"
        time.sleep(0.05)


def test_a_reply_past_the_monitored_cap_streams_through_unheld_and_is_counted_too_large(
    scripted: tuple[ScriptedUpstream, str], proxy: Proxy
) -> None:
    """A 3 MiB JSON reply (3x ``max_monitored_reply_bytes``) sent in pieces with a pause in the
    middle: the client has the first 2 MiB before the upstream sends the rest (serve does not
    read it whole first), gets every byte, and the turn is counted ``too_large``, not recorded."""
    app, _ = scripted
    doc = json.dumps(
        {"choices": [{"message": {"role": "assistant", "content": "z" * (3 * CAP)}}], "model": "m"}
    ).encode()
    half = 2 * CAP
    sid = app.add(Script([doc[:half], 2.0, doc[half:]], headers=[(b"content-type", b"application/json")]))
    before = _sample(proxy, "handoffmon_proxy_unmonitored_requests_total", {"reason": "too_large"})
    turns = _turns(proxy)
    got, first_half_at = bytearray(), None
    t0 = time.monotonic()
    with (
        httpx.Client(timeout=30) as c,
        c.stream("POST", f"{proxy.url}{CHAT}", json=BODY, headers={"x-script": sid}) as r,
    ):
        assert r.status_code == 200
        for piece in r.iter_raw():
            got += piece
            if first_half_at is None and len(got) >= half:
                first_half_at = time.monotonic() - t0
    assert bytes(got) == doc
    assert first_half_at is not None and first_half_at < 1.5  # before the upstream's 2 s pause ended
    after = _sample(proxy, "handoffmon_proxy_unmonitored_requests_total", {"reason": "too_large"})
    assert after == before + 1
    assert _turns(proxy) == turns
    # a reply within the cap is still monitored
    small = app.add(
        Script(
            [json.dumps({"choices": [{"message": {"role": "assistant", "content": "ok"}}]}).encode()],
            headers=[(b"content-type", b"application/json")],
        )
    )
    assert httpx.post(f"{proxy.url}{CHAT}", json=BODY, headers={"x-script": small}).status_code == 200
    assert _turns(proxy) == turns + 1


def test_large_upstream_response_headers_are_forwarded(
    scripted: tuple[ScriptedUpstream, str], proxy: Proxy
) -> None:
    """A 20 KB response header (aiohttp's default limit is 8,190 bytes) reaches the client, as
    it does directly."""
    app, url = scripted
    big = b"v" * 20_000
    sid = app.add(
        Script(
            [json.dumps({"choices": [{"message": {"role": "assistant", "content": "ok"}}]}).encode()],
            headers=[(b"content-type", b"application/json"), (b"x-big", big)],
        )
    )
    with httpx.Client(timeout=10) as c:
        direct = c.post(f"{url}{CHAT}", json=BODY, headers={"x-script": sid})
        proxied = c.post(f"{proxy.url}{CHAT}", json=BODY, headers={"x-script": sid})
    assert direct.status_code == proxied.status_code == 200
    assert proxied.headers["x-big"] == direct.headers["x-big"] == big.decode()


def test_past_the_upstream_request_limit_a_request_waits_then_gets_503_counted(
    scripted: tuple[ScriptedUpstream, str], proxy: Proxy
) -> None:
    """``max_upstream_requests`` = 2: two streams held open by a slow upstream take both slots
    (the in-flight gauge says 2 of 2); a third request waits ``upstream_queue_timeout_s`` and
    gets a clear 503 counted ``upstream_errors{kind="busy"}``; once a stream ends, requests go
    through again."""
    app, _ = scripted
    slow = app.add(
        Script([*sse(chunk(role="assistant", content="a"), done=False), 2.5, *sse(chunk(content="b"))])
    )
    quick = app.add(
        Script(
            [json.dumps({"choices": [{"message": {"role": "assistant", "content": "ok"}}]}).encode()],
            headers=[(b"content-type", b"application/json")],
        )
    )
    busy = _sample(proxy, "handoffmon_proxy_upstream_errors_total", {"kind": "busy"})
    results: list[int] = []

    def stream() -> None:
        with httpx.Client(timeout=30) as c:
            r = c.post(f"{proxy.url}{CHAT}", json={**BODY, "stream": True}, headers={"x-script": slow})
            results.append(r.status_code)

    threads = [threading.Thread(target=stream) for _ in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 5
    while _sample(proxy, "handoffmon_proxy_upstream_requests") < 2:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert _sample(proxy, "handoffmon_proxy_upstream_requests_limit") == 2
    t0 = time.monotonic()
    r = httpx.post(f"{proxy.url}/v1/models", headers={"x-script": quick}, timeout=10)
    waited = time.monotonic() - t0
    assert r.status_code == 503 and r.json()["error"]["code"] == "upstream_busy"
    assert "proxy.max_upstream_requests" in r.json()["error"]["message"]
    assert 0.4 < waited < 2.0
    assert _sample(proxy, "handoffmon_proxy_upstream_errors_total", {"kind": "busy"}) == busy + 1
    # a request that waits while a slot frees up gets it
    for t in threads:
        t.join(10)
    assert results == [200, 200]
    assert _sample(proxy, "handoffmon_proxy_upstream_requests") == 0
    assert httpx.post(f"{proxy.url}{CHAT}", json=BODY, headers={"x-script": quick}).status_code == 200


async def test_a_waiting_request_gets_the_slot_a_stream_gives_back(
    scripted: tuple[ScriptedUpstream, str], proxy: Proxy
) -> None:
    app, _ = scripted
    slow = app.add(
        Script([*sse(chunk(role="assistant", content="a"), done=False), 0.3, *sse(chunk(content="b"))])
    )
    async with httpx.AsyncClient(timeout=10) as c:

        async def one() -> int:
            r = await c.post(f"{proxy.url}{CHAT}", json={**BODY, "stream": True}, headers={"x-script": slow})
            return r.status_code

        statuses = await asyncio.gather(*(one() for _ in range(4)))  # two wait ~0.3 s for a slot
    assert statuses == [200, 200, 200, 200]


async def test_a_websocket_handshake_is_refused_clearly_without_a_traceback(
    proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    """The Realtime API's WebSocket is not proxied: a 501 naming that, counted, nothing logged
    at ERROR (before, a KeyError in the 404 handler answered 500 with a traceback)."""
    before = _sample(proxy, "handoffmon_proxy_requests_total", {"route": "other", "status_class": "5xx"})
    with caplog.at_level(logging.WARNING):
        async with aiohttp.ClientSession() as session:
            for path in ("/v1/realtime", "/ws"):
                with pytest.raises(aiohttp.WSServerHandshakeError) as err:
                    await session.ws_connect(f"{proxy.url}{path}")
                assert err.value.status == 501
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    after = _sample(proxy, "handoffmon_proxy_requests_total", {"route": "other", "status_class": "5xx"})
    assert after == before + 2


@pytest.mark.parametrize(
    "path",
    [
        "/v1/../admin/secret",
        "/v1/%2e%2e/admin",
        "/v1/..%2fadmin",
        "/v1/x/../chat/completions",
        "/openai/./v1/models",
        "/v1/x\\..\\admin",
    ],
)
def test_a_path_with_dot_segments_is_refused_and_never_forwarded(
    scripted: tuple[ScriptedUpstream, str], proxy: Proxy, path: str
) -> None:
    app, _ = scripted
    seen = len(app.seen)
    port = int(proxy.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        answer = b""
        while chunk_ := s.recv(65536):
            answer += chunk_
    assert answer.startswith(b"HTTP/1.1 400"), answer[:80]
    assert b"dot_segment" in answer
    assert len(app.seen) == seen
    ok = httpx.get(f"{proxy.url}/v1/files/.config", headers={"x-script": "none"})
    assert ok.status_code == 404 and len(app.seen) == seen + 1  # a dotted name is not a segment


@pytest.mark.slow
def test_a_stream_of_tiny_deltas_holds_about_its_characters() -> None:
    """200,000 two-character deltas (400,000 characters): the folder holds them joined in
    blocks (under 3 bytes per character), not as one ~50-byte object per delta (over 25)."""
    folder = ChunkFolder(max_chars=1 << 24)
    deltas = [f"{i % 100:02d}" for i in range(200_000)]
    chunks = [chunk(content=d) for d in deltas]
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for c in chunks:
            folder.feed(c)
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert folder.outcome(completed=True).reply["content"] == "".join(deltas)
    assert held < 3 * 400_000, held


def test_a_body_trickled_just_inside_the_pause_limit_is_cut_at_the_body_deadline(
    scripted: tuple[ScriptedUpstream, str], proxy: Proxy
) -> None:
    """A chat request whose body arrives one byte every 0.3 s (inside ``client_timeout_s`` =
    0.5 s) is answered 408 once ``body_timeout_s`` (1.5 s) has passed, never forwarded."""
    app, _ = scripted
    seen = len(app.seen)
    port = int(proxy.url.rsplit(":", 1)[1])
    head = f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n".encode()
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head)
        answer = b""
        s.settimeout(0.3)
        while not answer and time.monotonic() - t0 < 8:
            try:
                s.sendall(b"x")
                answer = s.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
    took = time.monotonic() - t0
    assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
    assert b"proxy.body_timeout_s" in answer
    assert 1.4 < took < 3.0
    assert len(app.seen) == seen


def test_past_max_connections_new_requests_get_503_until_connections_close(
    scripted: tuple[ScriptedUpstream, str],
) -> None:
    """``proxy.max_connections`` bounds what idle or trickling clients can hold: with 4 open
    (idle) connections, a fifth client's request is answered 503; once they close, it goes
    through."""
    app, url = scripted
    sid = app.add(Script([b"{}"], headers=[(b"content-type", b"application/json")]))
    cfg = proxy_config(url, proxy={"max_connections": 5})
    with running_proxy(cfg) as p:
        port = int(p.url.rsplit(":", 1)[1])
        idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(5)]
        try:
            time.sleep(0.2)  # the server has accepted them
            refused = httpx.get(f"{p.url}/v1/models", headers={"x-script": sid}, timeout=5)
            assert refused.status_code == 503
        finally:
            for sock in idle:
                sock.close()
        deadline = time.monotonic() + 5
        while True:
            r = httpx.get(f"{p.url}/v1/models", headers={"x-script": sid}, timeout=5)
            if r.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert r.status_code == 200


def test_a_compressed_request_is_forwarded_unchanged_and_monitored_from_a_copy(
    scripted: tuple[ScriptedUpstream, str], proxy: Proxy
) -> None:
    """A gzip chat request reaches the upstream byte for byte and is monitored (before, its
    bytes were read as JSON and counted ``bad_json``); one inflating past ``max_body_bytes`` is
    counted ``too_large``, and one in an encoding the monitor does not read ``encoded``."""
    app, _ = scripted
    reply = json.dumps({"choices": [{"message": {"role": "assistant", "content": "ok"}}], "model": "m"})
    sid = app.add(Script([reply.encode()], headers=[(b"content-type", b"application/json")]))

    def post(body: bytes, encoding: str) -> httpx.Response:
        headers = {"x-script": sid, "content-encoding": encoding, "content-type": "application/json"}
        return httpx.post(f"{proxy.url}{CHAT}", content=body, headers=headers, timeout=10)

    def unmonitored(reason: str) -> float:
        return _sample(proxy, "handoffmon_proxy_unmonitored_requests_total", {"reason": reason})

    before = {r: unmonitored(r) for r in ("bad_json", "too_large", "encoded")}
    turns = _turns(proxy)
    packed = gzip.compress(json.dumps(BODY).encode())
    assert post(packed, "gzip").status_code == 200
    assert app.received[-1] == (len(packed), hashlib.sha256(packed).hexdigest())
    assert _turns(proxy) == turns + 1
    bomb = gzip.compress(json.dumps({**BODY, "pad": "p" * (2 * CAP)}).encode())
    assert len(bomb) < CAP and post(bomb, "gzip").status_code == 200
    assert post(packed, "br").status_code == 200
    after = {r: unmonitored(r) for r in before}
    assert after == {
        "bad_json": before["bad_json"],
        "too_large": before["too_large"] + 1,
        "encoded": before["encoded"] + 1,
    }
    assert _turns(proxy) == turns + 1


def test_past_the_held_body_budget_a_request_streams_through_unmonitored_and_counted(
    upstream: Upstream,
) -> None:
    """Monitored bodies are read whole before they are forwarded; proxy.max_held_body_bytes bounds
    them together. While one ~0.9 MiB body waits on a slow upstream, a second one would pass the
    1.5 MiB budget: it is forwarded as it arrives, answered exactly as directly, counted
    unmonitored{reason="shed"} and not recorded. Once the first is done, the budget is whole
    again and the next request is monitored. (Before, nothing bounded concurrent bodies but
    max_connections x max_body_bytes: 100 clients posting 9 MiB took serve from 88 MB to 1.7 GB.)"""
    cfg = proxy_config(upstream.url, proxy={"max_body_bytes": CAP, "max_held_body_bytes": CAP + CAP // 2})
    text = "x" * (900 * 1024)

    def body(tag: str) -> dict[str, Any]:
        return {"model": "model-a", "messages": [{"role": "user", "content": f"{tag} {text}"}]}

    with running_proxy(cfg) as proxy:
        state = proxy.state
        slow: list[httpx.Response] = []
        delayed = {"x-mock-delay-s": "1.0"}
        t = threading.Thread(
            target=lambda: slow.append(
                httpx.post(f"{proxy.url}{CHAT}", json=body("slow"), headers=delayed, timeout=10)
            )
        )
        t.start()
        deadline = time.monotonic() + 5
        while state.held_bodies.held == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert state.held_bodies.held > 0
        over = {"model": "model-a", "messages": [{"role": "user", "content": "y" * (CAP + 10)}]}
        assert httpx.post(f"{proxy.url}{CHAT}", json=over, timeout=10).status_code == 413  # not shed
        shed = httpx.post(f"{proxy.url}{CHAT}", json=body("shed"), timeout=10)
        direct = httpx.post(f"{upstream.url}{CHAT}", json=body("shed"), timeout=10)
        assert shed.status_code == direct.status_code == 200
        assert shed.content == direct.content
        t.join(10)
        assert slow and slow[0].status_code == 200
        assert _sample(proxy, "handoffmon_proxy_unmonitored_requests_total", {"reason": "shed"}) == 1
        assert _turns(proxy) == 1  # the slow one, not the shed one
        assert state.held_bodies.held == 0
        assert httpx.post(f"{proxy.url}{CHAT}", json=body("after"), timeout=10).status_code == 200
        assert _turns(proxy) == 2

        # a chunked body (no Content-Length) takes max_body_bytes until it is read, then its size
        small = json.dumps(body("chunked")["messages"][0]["content"][:100]).encode()
        chunked = b'{"model": "model-a", "messages": [{"role": "user", "content": ' + small + b"}]}"
        t = threading.Thread(
            target=lambda: slow.append(
                httpx.post(f"{proxy.url}{CHAT}", content=iter([chunked]), headers=delayed, timeout=10)
            )
        )
        t.start()
        deadline = time.monotonic() + 5
        while not 0 < state.held_bodies.held <= len(chunked) and time.monotonic() < deadline:
            time.sleep(0.005)
        assert state.held_bodies.held == len(chunked)
        assert httpx.post(f"{proxy.url}{CHAT}", json=body("beside"), timeout=10).status_code == 200
        t.join(10)
        assert slow[-1].status_code == 200
        assert _sample(proxy, "handoffmon_proxy_unmonitored_requests_total", {"reason": "shed"}) == 1
        assert _turns(proxy) == 4
        assert state.held_bodies.held == 0
