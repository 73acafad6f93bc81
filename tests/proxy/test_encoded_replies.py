"""``serve`` and replies under a ``Content-Encoding``: the bytes reach the client unchanged and
a reply the monitor does not read is counted ``unmonitored{reason="encoded"}`` — never
``bad_reply``, which says the upstream sent garbage, and never a ``parse`` error.

A gzip/deflate JSON reply is read from an inflated copy (``test_app``); an event stream under
any encoding, and a JSON reply under one handoffmon does not undo (br, zstd) or a corrupt one,
are forwarded as they came and counted ``encoded``."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.proxy.conftest import Proxy, proxy_config, running_proxy
from tests.proxy.scripted_upstream import Script, ScriptedUpstream, sse

CHAT = "/v1/chat/completions"
BASE = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
REASONS = ("encoded", "bad_reply")


@pytest.fixture(scope="module")
def proxy(scripted: tuple[ScriptedUpstream, str]) -> Iterator[Proxy]:
    with running_proxy(proxy_config(scripted[1])) as p:
        yield p


def _counts(proxy: Proxy) -> dict[str, float]:
    assert proxy.monitor.flush(30)
    sample = proxy.registry.get_sample_value
    out = {r: sample("handoffmon_proxy_unmonitored_requests_total", {"reason": r}) or 0.0 for r in REASONS}
    out["parse_errors"] = sample("handoffmon_monitor_errors_total", {"stage": "parse"}) or 0.0
    out["turns"] = float(proxy.monitor.snapshot().total_turns)
    return out


def _raw(url: str, sid: str, stream: bool) -> bytes:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    with (
        httpx.Client(timeout=10) as c,
        c.stream("POST", f"{url}{CHAT}", json=body, headers={"x-script": sid}) as r,
    ):
        assert r.status_code == 200
        return b"".join(r.iter_raw())


def _gzip_events() -> bytes:
    events = sse(
        {**BASE, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hello"}}]},
        {**BASE, "choices": [{"index": 0, "delta": {"content": " there"}, "finish_reason": "stop"}]},
    )
    return gzip.compress(b"".join(events), mtime=0)


def _deflate_events() -> bytes:
    event = {**BASE, "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}
    return zlib.compress(b"".join(sse(event)))


STREAMS: dict[str, tuple[bytes, bytes]] = {
    "gzip": (b"gzip", _gzip_events()),
    "deflate": (b"deflate", _deflate_events()),
    "br": (b"br", b"\x8b\x03\x80not really brotli but opaque bytes\x03"),
}


@pytest.mark.parametrize("name", list(STREAMS))
def test_an_encoded_event_stream_passes_unchanged_and_is_counted_encoded(
    scripted: tuple[ScriptedUpstream, str], proxy: Proxy, name: str
) -> None:
    """An upstream that compresses its event stream: the client gets the compressed bytes as
    sent (in pieces, as they came); the turn is counted ``encoded``, not ``bad_reply``, and no
    parse error is counted (nothing was judged)."""
    app, url = scripted
    encoding, payload = STREAMS[name]
    pieces: list[bytes | float] = [payload[: len(payload) // 2], payload[len(payload) // 2 :]]
    headers = [(b"content-type", b"text/event-stream"), (b"content-encoding", encoding)]
    sid = app.add(Script(pieces, headers=headers))
    before = _counts(proxy)
    assert _raw(proxy.url, sid, stream=True) == _raw(url, sid, stream=True) == payload
    after = _counts(proxy)
    assert {k: after[k] - before[k] for k in after} == {
        "encoded": 1,
        "bad_reply": 0,
        "parse_errors": 0,
        "turns": 0,
    }


@pytest.mark.parametrize("name", ["br", "corrupt_gzip"])
def test_a_json_reply_the_monitor_cannot_inflate_is_counted_encoded(
    scripted: tuple[ScriptedUpstream, str], proxy: Proxy, name: str
) -> None:
    """A JSON reply under an encoding handoffmon does not undo, or a gzip body that is not gzip:
    forwarded unchanged, counted ``encoded`` as the same request body would be."""
    app, url = scripted
    doc = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}}], "model": "m"}
    data = json.dumps(doc).encode()
    encoding, payload = (b"br", b"\x0b\x02opaque") if name == "br" else (b"gzip", b"\x1f\x8bnot gzip" + data)
    headers: list[tuple[bytes, bytes]] = [
        (b"content-type", b"application/json"),
        (b"content-encoding", encoding),
        (b"content-length", str(len(payload)).encode()),
    ]
    sid = app.add(Script([payload], headers=headers))
    before = _counts(proxy)
    assert _raw(proxy.url, sid, stream=False) == _raw(url, sid, stream=False) == payload
    after = _counts(proxy)
    delta: dict[str, Any] = {k: after[k] - before[k] for k in after}
    assert delta == {"encoded": 1, "bad_reply": 0, "parse_errors": 0, "turns": 0}


def test_an_identity_encoded_stream_is_still_monitored(
    scripted: tuple[ScriptedUpstream, str], proxy: Proxy
) -> None:
    """``Content-Encoding: identity`` is no encoding: the stream is read and recorded as usual."""
    app, url = scripted
    headers = [(b"content-type", b"text/event-stream"), (b"content-encoding", b"identity")]
    event = {**BASE, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"}}]}
    sid = app.add(Script(list(sse(event)), headers=headers))
    before = _counts(proxy)
    assert _raw(proxy.url, sid, stream=True) == _raw(url, sid, stream=True)
    after = _counts(proxy)
    assert after["turns"] - before["turns"] == 1
    assert after["encoded"] == before["encoded"]
