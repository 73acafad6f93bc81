"""``serve`` against bad upstreams and hostile clients (issue 17): traffic stays what a direct call gives."""

from __future__ import annotations

import asyncio
import gzip
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from click.testing import CliRunner
from prometheus_client.core import GaugeMetricFamily

from handoffmon.cli import main
from handoffmon.errors import ConfigError
from handoffmon.ingress.sse import SSEChunks
from handoffmon.proxy.server import UvicornNoise, check_exposure, check_limits, quiet_uvicorn
from tests.conftest import free_port
from tests.proxy.conftest import Proxy, proxy_config, running_proxy
from tests.proxy.scripted_upstream import Script, ScriptedUpstream, sse

CHAT = "/v1/chat/completions"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
BASE = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def chunk(**delta: Any) -> dict[str, Any]:
    return {**BASE, "choices": [{"index": 0, "delta": delta}]}


ODD_CHUNKS: dict[str, Any] = {
    "tool_call_index_null": chunk(tool_calls=[{"index": None, "function": {"arguments": "{"}}]),
    "tool_call_index_x": chunk(tool_calls=[{"index": "x", "function": {"name": "f"}}]),
    "tool_calls_5": chunk(tool_calls=5),
    "choices_1": {**BASE, "choices": 1},
    "not_json": b"data: {not json\n\n",
}


@pytest.fixture(scope="module")
def proxy(scripted: tuple[ScriptedUpstream, str]) -> Iterator[Proxy]:
    cfg = proxy_config(
        scripted[1],
        proxy={"client_timeout_s": 0.5, "max_header_bytes": 16 * 1024, "max_monitored_reply_bytes": 1 << 20},
    )
    with running_proxy(cfg) as p:
        yield p


def _sample(proxy: Proxy, name: str, labels: dict[str, str] | None = None) -> float:
    """A sample once the monitor has handled what it was given (a JSON reply's bodies are
    parsed, and an unreadable one counted, on the attribution thread)."""
    assert proxy.monitor.flush(30)
    return proxy.registry.get_sample_value(name, labels or {}) or 0.0


def _parse_errors(proxy: Proxy) -> float:
    return _sample(proxy, "handoffmon_monitor_errors_total", {"stage": "parse"})


def _turns(proxy: Proxy) -> int:
    assert proxy.monitor.flush(10)
    return int(proxy.monitor.snapshot().total_turns)


def _both(url: str, proxy: Proxy, sid: str, **kw: Any) -> tuple[httpx.Response, httpx.Response]:
    headers = {"x-script": sid, **kw.pop("headers", {})}
    with httpx.Client(timeout=10) as c:
        direct = c.post(f"{url}{CHAT}", json=BODY, headers=headers, **kw)
        proxied = c.post(f"{proxy.url}{CHAT}", json=BODY, headers=headers, **kw)
    return direct, proxied


def _sdk_stream(client: openai.OpenAI, sid: str) -> Any:
    """A streamed chat completion through the real OpenAI SDK, answered by script ``sid``."""
    return client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True, extra_headers={"x-script": sid}
    )


@pytest.mark.parametrize("name", sorted(ODD_CHUNKS))
def test_odd_chunk_passes_through_and_the_sdk_gets_the_whole_stream(
    name: str, scripted: tuple[ScriptedUpstream, str], proxy: Proxy
) -> None:
    """The issue's stream-reset regression: an odd chunk mid-stream reaches the real OpenAI SDK
    exactly as a direct call does (no APIConnectionError); the odd part is counted as a parse error."""
    app, url = scripted
    sid = app.add(Script(sse(chunk(role="assistant", content="a"), ODD_CHUNKS[name], chunk(content="b"))))
    before_parse, before_turns = _parse_errors(proxy), _turns(proxy)
    got: dict[str, Any] = {}
    for label, base in (("direct", url), ("proxied", proxy.url)):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0)
        stream = _sdk_stream(client, sid)
        try:
            got[label] = [c.id for c in stream]
        except Exception as exc:  # the SDK's own verdict on the chunk (non-JSON data): same both ways
            got[label] = type(exc)
        client.close()
    assert got["proxied"] == got["direct"]
    if name != "not_json":
        assert isinstance(got["direct"], list) and len(got["direct"]) >= 2
    direct, proxied = _both(url, proxy, sid)
    assert proxied.content == direct.content and proxied.status_code == 200
    assert _parse_errors(proxy) >= before_parse + 1
    assert _turns(proxy) == before_turns + 2  # still monitored: the odd part is skipped, not the turn


def test_a_parser_that_raises_never_touches_the_bytes(
    scripted: tuple[ScriptedUpstream, str], proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even a parser bug (feed raises) leaves the stream byte-identical; counted parse + bad_reply."""
    app, url = scripted
    sid = app.add(Script(sse(chunk(role="assistant", content="a"), chunk(content="b"))))

    def boom(self: SSEChunks, data: bytes) -> None:
        raise RuntimeError("parser bug")

    monkeypatch.setattr(SSEChunks, "feed", boom)
    before_parse = _parse_errors(proxy)
    before_bad = _sample(proxy, "handoffmon_proxy_unmonitored_requests_total", {"reason": "bad_reply"})
    direct, proxied = _both(url, proxy, sid)
    assert (proxied.status_code, proxied.content) == (direct.status_code, direct.content)
    assert _parse_errors(proxy) == before_parse + 1
    assert (
        _sample(proxy, "handoffmon_proxy_unmonitored_requests_total", {"reason": "bad_reply"})
        == before_bad + 1
    )


def test_upstream_cut_off_aborts_the_client_response_and_records_no_turn(
    scripted: tuple[ScriptedUpstream, str], proxy: Proxy
) -> None:
    """An upstream that drops the connection mid-stream: the client's response breaks off the same
    way (httpx and the SDK raise as they do direct), no turn is recorded, the cut is counted."""
    app, url = scripted
    sid = app.add(Script(sse(chunk(role="assistant", content="part"), done=False), cut=True))
    before_turns = _turns(proxy)
    before_cut = _sample(proxy, "handoffmon_proxy_upstream_errors_total", {"kind": "stream"})
    before_trunc = _sample(proxy, "handoffmon_proxy_unmonitored_requests_total", {"reason": "truncated"})
    errors: dict[str, type[BaseException]] = {}
    for label, base in (("direct", url), ("proxied", proxy.url)):
        with pytest.raises(httpx.RemoteProtocolError) as info:
            httpx.post(f"{base}{CHAT}", json=BODY, headers={"x-script": sid}, timeout=10)
        errors[label] = type(info.value)
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0)
        stream = _sdk_stream(client, sid)
        with pytest.raises(Exception) as sdk:
            list(stream)
        errors[f"sdk-{label}"] = type(sdk.value)
        client.close()
    assert errors["proxied"] is errors["direct"]
    assert errors["sdk-proxied"] is errors["sdk-direct"]
    assert _turns(proxy) == before_turns
    assert _sample(proxy, "handoffmon_proxy_upstream_errors_total", {"kind": "stream"}) == before_cut + 2
    assert (
        _sample(proxy, "handoffmon_proxy_unmonitored_requests_total", {"reason": "truncated"})
        == before_trunc + 2
    )
    assert httpx.get(f"{proxy.url}/readyz").status_code == 200


def test_gzip_bomb_reply_passes_compressed_and_is_not_decompressed_whole(
    scripted: tuple[ScriptedUpstream, str], proxy: Proxy
) -> None:
    """A ~100 KB gzip reply that inflates to 100 MiB: the client gets the compressed bytes unchanged;
    the monitor decompresses at most proxy.max_monitored_reply_bytes (+1) and counts too_large."""
    app, url = scripted
    doc = b'{"choices": [{"message": {"role": "assistant", "content": "' + b"a" * (100 << 20) + b'"}}]}'
    bomb = gzip.compress(doc, compresslevel=9, mtime=0)
    assert len(bomb) < 200_000
    headers = [(b"content-type", b"application/json"), (b"content-encoding", b"gzip")]
    sid = app.add(Script([bomb], headers=[*headers, (b"content-length", str(len(bomb)).encode())]))
    before = _sample(proxy, "handoffmon_proxy_unmonitored_requests_total", {"reason": "too_large"})
    raw: dict[str, bytes] = {}
    body = {**BODY, "stream": False}
    with httpx.Client(timeout=30) as c:
        for label, base in (("direct", url), ("proxied", proxy.url)):
            with c.stream("POST", f"{base}{CHAT}", json=body, headers={"x-script": sid}) as r:
                raw[label] = b"".join(r.iter_raw())
    assert raw["proxied"] == raw["direct"] == bomb
    assert (
        _sample(proxy, "handoffmon_proxy_unmonitored_requests_total", {"reason": "too_large"}) == before + 1
    )


def test_a_stream_longer_than_the_monitored_cap_passes_whole_and_is_counted_too_large(
    scripted: tuple[ScriptedUpstream, str], proxy: Proxy
) -> None:
    """An event stream of 3 MiB of text through the 1 MiB ``max_monitored_reply_bytes``: the
    client gets every byte; the folder keeps nothing past the cap, and the turn is counted
    too_large instead of recorded with part of its text."""
    app, url = scripted
    pieces = sse(chunk(role="assistant", content=""), *(chunk(content="y" * 65536) for _ in range(48)))
    sid = app.add(Script(pieces))
    before_large = _sample(proxy, "handoffmon_proxy_unmonitored_requests_total", {"reason": "too_large"})
    before_turns = _turns(proxy)
    direct, proxied = _both(url, proxy, sid)
    assert proxied.status_code == 200 and proxied.content == direct.content and len(proxied.content) > 3 << 20
    after = _sample(proxy, "handoffmon_proxy_unmonitored_requests_total", {"reason": "too_large"})
    assert after == before_large + 1
    assert _turns(proxy) == before_turns  # not recorded with part of its text
    sid = app.add(Script(sse(chunk(role="assistant", content="short"))))
    _both(url, proxy, sid)
    assert _turns(proxy) == before_turns + 1  # the next stream is recorded as usual


def test_connection_named_headers_are_hop_by_hop_and_utf8_bytes_arrive_unchanged(
    scripted: tuple[ScriptedUpstream, str], proxy: Proxy
) -> None:
    """Headers named in ``Connection:`` are not forwarded (either way); non-ASCII header bytes reach
    the upstream byte-identical (not double-encoded); non-UTF-8 header bytes get a clear 400."""
    app, _ = scripted
    resp_headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"2"),
        (b"connection", b"x-up-private"),
        (b"x-up-private", b"1"),
        (b"x-up-public", "dé".encode()),
    ]
    sid = app.add(Script([b"{}"], headers=resp_headers))
    value = "Zoë – 東京".encode()
    port = int(proxy.url.rsplit(":", 1)[1])
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n"
        b"connection: keep-alive, x-secret-hop\r\nx-secret-hop: 1\r\nx-script: " + sid.encode() + b"\r\n"
        b"x-name: " + value + b"\r\n\r\n{}"
    )
    reply = _raw_request(port, head)
    seen = dict(app.seen[-1])
    assert seen[b"x-name"] == value
    assert b"x-secret-hop" not in seen
    assert b"x-up-private" not in reply.lower() and "x-up-public: dé".encode() in reply
    bad = head.replace(value, b"caf\xe9")
    reply = _raw_request(port, bad)
    assert reply.startswith(b"HTTP/1.1 400") and b"header_not_utf8" in reply


def _raw_request(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while b"\r\n\r\n" not in out or not _complete(out):
            piece = s.recv(65536)
            if not piece:
                break
            out += piece
    return out


def _complete(resp: bytes) -> bool:
    head, _, body = resp.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


def test_oversized_headers_get_431_and_are_not_forwarded(
    scripted: tuple[ScriptedUpstream, str], proxy: Proxy
) -> None:
    """One 40 KB header, and 2 MB of headers streamed in pieces, over max_header_bytes (16 KiB): 431,
    the connection closed, the upstream never sees them; the proxy keeps serving."""
    app, _ = scripted
    seen = len(app.seen)
    port = int(proxy.url.rsplit(":", 1)[1])
    reply = _raw_request(port, b"GET /v1/models HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 40_000 + b"\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 431")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET /v1/models HTTP/1.1\r\nhost: x\r\nx-huge: ")
        sent = 0
        try:
            while sent < 2_000_000:
                s.sendall(b"b" * 65536)
                sent += 65536
        except OSError:  # the proxy answered and closed while we were still sending
            pass
        reply = s.recv(65536)
    assert reply.startswith(b"HTTP/1.1 431") or reply == b""
    assert sent < 2_000_000 or reply.startswith(b"HTTP/1.1 431")
    assert len(app.seen) == seen
    assert httpx.get(f"{proxy.url}/healthz").status_code == 200


def test_slow_and_half_open_clients_time_out(proxy: Proxy) -> None:
    """client_timeout_s = 0.5: a silent connection, a slowloris head and a stalled body each get 408
    and are closed within about a second, instead of holding the connection open."""
    port = int(proxy.url.rsplit(":", 1)[1])
    cases = {
        "silent": b"",
        "slow head": b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n",
        "stalled body": b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{",
    }
    for name, data in cases.items():
        t0 = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            if data:
                s.sendall(data)
            out = b""
            while piece := s.recv(65536):
                out += piece
        assert out.startswith(b"HTTP/1.1 408"), (name, out[:80])
        assert time.monotonic() - t0 < 3, name


def test_requests_refused_before_the_app_are_counted_and_their_warnings_limited(
    proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    """Requests the connection answers itself never reach the app: not HTTP (400), a head over
    max_header_bytes (431), a head slower than client_timeout_s (408). Each counts in
    proxy_requests_total{route="other"} (before, none did: a flood of them was invisible), and
    uvicorn's one WARNING per bad request ("Invalid HTTP request received.") passes once per
    pipeline.error_log_interval_s (60 s), not once per request."""
    port = int(proxy.url.rsplit(":", 1)[1])
    quiet_uvicorn(proxy.config)

    def other_4xx() -> float:
        labels = {"route": "other", "status_class": "4xx"}
        return proxy.registry.get_sample_value("handoffmon_proxy_requests_total", labels) or 0.0

    before = other_4xx()
    with caplog.at_level(logging.WARNING, logger="uvicorn.error"):
        for _ in range(5):
            assert _raw_request(port, b"NOT HTTP AT ALL\r\n\r\n").startswith(b"HTTP/1.1 400")
        big = b"GET /v1/models HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 40_000 + b"\r\n\r\n"
        assert _raw_request(port, big).startswith(b"HTTP/1.1 431")
        slow = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
        assert _raw_request(port, slow).startswith(b"HTTP/1.1 408")
    assert other_4xx() - before == 7
    invalid = [r for r in caplog.records if r.getMessage().startswith("Invalid HTTP request received.")]
    assert len(invalid) <= 1, [r.getMessage() for r in invalid]
    assert httpx.get(f"{proxy.url}/healthz").status_code == 200


def test_client_made_uvicorn_warnings_pass_once_per_interval_with_a_held_count() -> None:
    now = [0.0]
    noise = UvicornNoise(60.0, clock=lambda: now[0])

    def passes(msg: str) -> str | None:
        record = logging.LogRecord("uvicorn.error", logging.WARNING, __file__, 1, msg, (), None)
        return record.getMessage() if noise.filter(record) else None

    assert passes("Invalid HTTP request received.") == "Invalid HTTP request received."
    assert [passes("Invalid HTTP request received.") for _ in range(3)] == [None, None, None]
    assert passes("Exceeded concurrency limit.") == "Exceeded concurrency limit."  # its own kind
    assert passes("Application startup complete.") == "Application startup complete."  # not a client's
    assert passes("ASGI callable returned without completing response.") is None  # serve's own abort
    now[0] = 61.0
    assert passes("Invalid HTTP request received.") == (
        "Invalid HTTP request received. (+3 like it since the last line)"
    )


class _BigBlockingCollector:
    """80k series; collect() blocks until released (a render that takes as long as the test wants)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        self.entered.set()
        self.release.wait(30)
        g = GaugeMetricFamily("handoffmon_test_big", "80k series", labels=["i"])
        for i in range(80_000):
            g.add_metric([str(i)], float(i))
        yield g


@pytest.mark.slow
async def test_metrics_render_off_the_event_loop_and_within_a_time_bound(
    scripted: tuple[ScriptedUpstream, str],
) -> None:
    """While /metrics renders a large registry (blocked in collect), proxied requests keep flowing;
    the render then completes (200, all series); past metrics_render_timeout_s a scrape gets 503."""
    app, url = scripted
    with running_proxy(proxy_config(url, proxy={"metrics_render_timeout_s": 30.0})) as p:
        big = _BigBlockingCollector()
        p.registry.register(big)
        sid = app.add(Script([b'{"ok": true}'], headers=[(b"content-type", b"application/json")]))
        async with httpx.AsyncClient(timeout=10) as c:
            scrape = asyncio.ensure_future(c.get(f"{p.url}/metrics"))
            assert await asyncio.to_thread(big.entered.wait, 5)
            t0 = time.monotonic()
            for _ in range(20):
                r = await c.post(f"{p.url}{CHAT}", json=BODY, headers={"x-script": sid})
                assert r.status_code == 200
            flowing = time.monotonic() - t0
            assert not scrape.done()  # the render is still blocked while the requests went through
            big.release.set()
            metrics = await scrape
        assert metrics.status_code == 200 and 'handoffmon_test_big{i="79999"}' in metrics.text
        assert flowing < 5.0
    with running_proxy(proxy_config(url, proxy={"metrics_render_timeout_s": 1.0})) as p:
        big = _BigBlockingCollector()
        p.registry.register(big)
        before = _sample(p, "handoffmon_monitor_errors_total", {"stage": "export"})
        t0 = time.monotonic()
        r = await asyncio.to_thread(httpx.get, f"{p.url}/metrics", timeout=10)
        assert r.status_code == 503 and "metrics_render_timeout_s" in r.text
        assert 0.9 < time.monotonic() - t0 < 4
        big.release.set()
        assert _sample(p, "handoffmon_monitor_errors_total", {"stage": "export"}) == before + 1


def test_beyond_loopback_needs_a_token_naming_key_and_file(tmp_path: Any) -> None:
    """proxy.host 0.0.0.0 without telemetry.metrics_token: serve refuses, naming the key and the file."""
    cfg = tmp_path / "h.yaml"
    cfg.write_text("proxy:\n  upstream: http://127.0.0.1:9\n  host: 0.0.0.0\n")
    result = CliRunner().invoke(main, ["serve", "--config", str(cfg), "--port", str(free_port())])
    assert result.exit_code != 0
    assert "telemetry.metrics_token" in result.output and str(cfg) in result.output
    for host, token in (("127.0.0.1", None), ("::1", None), ("0.0.0.0", "t")):
        check_exposure(proxy_config("http://u", proxy={"host": host}, telemetry={"metrics_token": token}))
    with pytest.raises(ConfigError, match=r"telemetry\.metrics_token"):
        check_exposure(proxy_config("http://u", proxy={"host": "10.0.0.5"}))


def test_a_byte_budget_below_the_body_limit_is_refused_naming_key_and_file(tmp_path: Any) -> None:
    """pipeline.max_queued_bytes under proxy.max_body_bytes would shed every request between the
    two from monitoring: serve refuses to start, naming the key and the file."""
    cfg = tmp_path / "h.yaml"
    cfg.write_text(
        "proxy:\n  upstream: http://127.0.0.1:9\n  max_body_bytes: 2000000\n"
        "pipeline:\n  max_queued_bytes: 1000000\n"
    )
    result = CliRunner().invoke(main, ["serve", "--config", str(cfg), "--port", str(free_port())])
    assert result.exit_code != 0
    assert "pipeline.max_queued_bytes" in result.output and str(cfg) in result.output
    check_limits(
        proxy_config("http://u", proxy={"max_body_bytes": 1000}, pipeline={"max_queued_bytes": 1000})
    )


def test_a_held_body_budget_below_the_body_limit_is_refused_naming_key_and_file(tmp_path: Any) -> None:
    """proxy.max_held_body_bytes under proxy.max_body_bytes would shed every body between the two
    from monitoring: serve refuses to start, naming the key and the file."""
    cfg = tmp_path / "h.yaml"
    cfg.write_text(
        "proxy:\n  upstream: http://127.0.0.1:9\n  max_body_bytes: 2000000\n  max_held_body_bytes: 1000000\n"
    )
    result = CliRunner().invoke(main, ["serve", "--config", str(cfg), "--port", str(free_port())])
    assert result.exit_code != 0
    assert "proxy.max_held_body_bytes" in result.output and str(cfg) in result.output
    check_limits(proxy_config("http://u", proxy={"max_body_bytes": 1000, "max_held_body_bytes": 1000}))


def test_readyz_answers_503_while_draining_and_requests_still_flow(
    scripted: tuple[ScriptedUpstream, str],
) -> None:
    """SIGTERM to `handoffmon serve`: for proxy.drain_delay_s /readyz answers 503 "draining" (not
    unreachable) while proxied requests are still served; then the process exits cleanly."""
    import os
    import signal
    import subprocess
    import sys

    app, url = scripted
    port = free_port()
    env = {
        **os.environ,
        "HANDOFFMON_PROXY__DRAIN_DELAY_S": "2",
        "HANDOFFMON_REFIT__INTERVAL_S": "0",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "handoffmon", "serve", "--upstream", url, "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (
                proc.stderr.read() if proc.stderr else ""
            )
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        r = httpx.get(f"{base}/readyz", timeout=2)
        assert r.status_code == 503 and r.json()["status"] == "draining"
        sid = app.add(Script([b"{}"], headers=[(b"content-type", b"application/json")]))
        assert httpx.post(f"{base}{CHAT}", json=BODY, headers={"x-script": sid}, timeout=5).status_code == 200
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal it handled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
