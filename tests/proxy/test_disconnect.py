"""A client hanging up cancels its upstream request, under serve's protocol and under any ASGI server.

``serve``'s HTTP protocol tells a connection's in-flight requests ``lost()`` when it closes
(``forward.DISCONNECT_EXTENSION``); under another server (uvicorn's own protocol here) each
request watches ``receive()`` for ``http.disconnect`` on a task of its own. Both must cut the
upstream call at once and leave the proxy healthy, and the connection's watch set must not
grow with keep-alive requests.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from handoffmon.counts import CheckKey, TurnKey
from handoffmon.proxy.forward import DISCONNECT_EXTENSION, _DisconnectWatch
from handoffmon.proxy.server import guarded_protocol
from tests.conftest import free_port
from tests.proxy.conftest import Proxy, Upstream, proxy_config, running_proxy
from tests.proxy.mock_upstream import ServerThread

PROTOCOLS = {"serve": {}, "plain-uvicorn": {"http": "httptools"}}


@pytest.fixture(scope="module", params=sorted(PROTOCOLS))
def proxy(request: pytest.FixtureRequest, upstream: Upstream) -> Iterator[Proxy]:
    rules = [{"name": "short", "check": "length", "params": {"unit": "words", "max": 5}}]
    cfg = proxy_config(upstream.url, proxy={"upstream_timeout_s": 2}, rules=rules)
    with running_proxy(cfg, **PROTOCOLS[request.param]) as p:
        yield p


def _turns(proxy: Proxy) -> Counter[TurnKey]:
    return Counter(proxy.monitor.snapshot().turns)


def _checks(proxy: Proxy) -> Counter[CheckKey]:
    return Counter(proxy.monitor.snapshot().checks)


def _head(body: bytes, extra: bytes) -> bytes:
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        + extra
        + f"content-length: {len(body)}\r\n\r\n".encode()
    )


def test_client_disconnect_mid_stream_cancels_upstream(proxy: Proxy, upstream: Upstream) -> None:
    """A client hanging up mid-stream: upstream stream cancelled, partial turn recorded, proxy healthy."""
    cancelled = upstream.mock.cancelled
    disconnects = proxy.registry.get_sample_value("handoffmon_proxy_client_disconnects_total") or 0
    assert proxy.monitor.flush(10)
    before, checks_before = _turns(proxy), _checks(proxy)
    body = json.dumps(
        {"model": "g", "messages": [{"role": "user", "content": "long please"}], "stream": True}
    ).encode()
    port = int(proxy.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(_head(body, b"x-mock-chunk-delay-s: 0.02\r\nx-mock-chunks: 200\r\n") + body)
        got = b""
        while got.count(b"data:") < 5:
            got += s.recv(65536)
    deadline = time.monotonic() + 3
    while upstream.mock.cancelled == cancelled and time.monotonic() < deadline:
        time.sleep(0.02)
    assert upstream.mock.cancelled == cancelled + 1
    assert proxy.registry.get_sample_value("handoffmon_proxy_client_disconnects_total") == disconnects + 1
    assert proxy.monitor.flush(10)
    after = _turns(proxy)
    after.subtract(before)
    assert sum((+after).values()) == 1  # the cut-off reply is still a turn
    checks = _checks(proxy)
    checks.subtract(checks_before)
    assert {k.verdict: n for k, n in (+checks).items()} == {"not_applicable": 1}  # but not judged
    assert httpx.get(f"{proxy.url}/readyz").status_code == 200


def test_client_disconnect_while_waiting_cancels_upstream_request(proxy: Proxy, upstream: Upstream) -> None:
    """A client hanging up before a (slow) JSON reply: the upstream request is abandoned at once."""
    cancelled = upstream.mock.cancelled
    disconnects = proxy.registry.get_sample_value("handoffmon_proxy_client_disconnects_total") or 0
    body = json.dumps({"model": "g", "messages": [{"role": "user", "content": "slow json"}]}).encode()
    port = int(proxy.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(_head(body, b"x-mock-delay-s: 0.4\r\n") + body)
        time.sleep(0.1)
    _assert_cancelled_and_counted(
        proxy, upstream, cancelled, disconnects, within_s=0.3
    )  # before the 0.4 s reply
    assert httpx.get(f"{proxy.url}/readyz").status_code == 200


def test_client_hanging_up_after_a_large_body_cancels_upstream_request(
    proxy: Proxy, upstream: Upstream
) -> None:
    """The same after a body over uvicorn's 64 KiB read buffer. uvicorn pauses reading for such
    a body and resumes only in the app's next receive(), which serve's forwarder (watching the
    connection, not receive) never makes: the client's close went unseen, and the request held
    its body and an upstream slot until the upstream answered or proxy.upstream_timeout_s
    (100 clients sending 9 MiB to a hung upstream and leaving: 99 connections in CLOSE-WAIT,
    handoffmon_proxy_upstream_requests 99, RSS 1.6 GB, for 600 s)."""
    cancelled = upstream.mock.cancelled
    disconnects = proxy.registry.get_sample_value("handoffmon_proxy_client_disconnects_total") or 0
    text = "slow json " + "x" * (1 << 20)
    body = json.dumps({"model": "g", "messages": [{"role": "user", "content": text}]}).encode()
    port = int(proxy.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(_head(body, b"x-mock-delay-s: 1.5\r\n") + body[:-200_000])
        time.sleep(0.2)
        s.sendall(body[-200_000:])  # the body's end in one read, over the 64 KiB buffer: reading paused
        time.sleep(0.3)
    _assert_cancelled_and_counted(
        proxy, upstream, cancelled, disconnects, within_s=1.0
    )  # before the 1.5 s reply
    assert proxy.registry.get_sample_value("handoffmon_proxy_upstream_requests") == 0


def test_completed_requests_are_not_counted_as_disconnects(proxy: Proxy) -> None:
    """Clients that close right after their reply (new connection per request) are not disconnects."""
    disconnects = proxy.registry.get_sample_value("handoffmon_proxy_client_disconnects_total") or 0
    good = {"model": "g", "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(20):
        with httpx.Client(timeout=5) as c:
            assert c.post(f"{proxy.url}/v1/chat/completions", json=good).status_code == 200
    assert proxy.registry.get_sample_value("handoffmon_proxy_client_disconnects_total") == disconnects


def test_serve_protocol_keeps_no_watch_after_a_request() -> None:
    """serve's protocol puts the connection's watch set in every scope; the forwarder's watch
    leaves it when the request ends, so keep-alive connections do not accumulate watches."""
    seen: list[tuple[int, int]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        watchers = scope["extensions"][DISCONNECT_EXTENSION]
        watch = _DisconnectWatch(scope, receive)
        seen.append((id(watchers), len(watchers)))
        watch.stop()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        seen.append((id(watchers), len(watchers)))

    with ServerThread(app, free_port(), http=guarded_protocol(8192, 5.0)) as srv, httpx.Client() as c:
        for _ in range(50):
            assert c.get(srv.url).status_code == 200
    assert len(seen) == 100
    assert {n for _, n in seen[0::2]} == {1}  # registered while in flight
    assert {n for _, n in seen[1::2]} == {0}  # gone once stopped
    assert len({i for i, _ in seen}) == 1  # one keep-alive connection, one set


def test_watch_falls_back_to_a_task_without_the_extension() -> None:
    """Without serve's extension a watch cancels its request when receive() reports a disconnect."""

    async def scenario() -> tuple[bool, bool]:
        gone = asyncio.Event()

        async def receive() -> dict[str, Any]:
            await gone.wait()
            return {"type": "http.disconnect"}

        async def request() -> bool:
            watch = _DisconnectWatch({"type": "http"}, receive)
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                return watch.absorb()
            finally:
                watch.stop()
            return False

        task = asyncio.ensure_future(request())
        await asyncio.sleep(0.01)
        gone.set()
        absorbed = await asyncio.wait_for(task, 1)
        return absorbed, task.cancelling() == 0

    absorbed, uncancelled = asyncio.run(scenario())
    assert absorbed and uncancelled


def _assert_cancelled_and_counted(
    proxy: Proxy, upstream: Upstream, cancelled: int, disconnects: float, within_s: float
) -> None:
    """The upstream request was cancelled within ``within_s`` of the client leaving, and the
    disconnect counted (within a second more)."""
    deadline = time.monotonic() + within_s
    while upstream.mock.cancelled == cancelled and time.monotonic() < deadline:
        time.sleep(0.01)
    assert upstream.mock.cancelled == cancelled + 1
    deadline = time.monotonic() + 1
    while time.monotonic() < deadline and (
        proxy.registry.get_sample_value("handoffmon_proxy_client_disconnects_total") != disconnects + 1
    ):
        time.sleep(0.01)
    assert proxy.registry.get_sample_value("handoffmon_proxy_client_disconnects_total") == disconnects + 1
