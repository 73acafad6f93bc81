"""``serve``'s lean request path: the same answers as the Starlette stack and ``json.loads`` give."""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from handoffmon.proxy.forward import loads
from tests.proxy.conftest import Proxy, proxy_config, running_proxy
from tests.proxy.scripted_upstream import Script, ScriptedUpstream

LOADS_CASES = [
    b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}',
    b'{"n": 123456789012345678901234567890, "m": -9223372036854775809}',
    b'{"n": 18446744073709551615, "id": "12345678901234567890123"}',
    b'{"x": NaN, "y": Infinity, "z": -Infinity}',
    b'{"big": 1e400, "tiny": 1.5e-400, "neg0": -0.0}',
    b'"\\ud800 lone surrogate"',
    b'{"a": 1, "a": 2}',
    codecs.BOM_UTF8 + b'{"bom": true}',
    '{"utf16": "\u00e9"}'.encode("utf-16"),
    b'{"open": ',
    b"{broken",
    b"",
    b"\xff\xfe\xfd",
    b"[" * 5000 + b"]" * 5000,
    b'{"ok": [1, 2.5, "\\u00e9", null, true, false]} ',
]


def _outcome(fn: Any, data: bytes) -> tuple[str, Any]:
    try:
        return "ok", repr(fn(data))
    except RecursionError:
        return "error", "RecursionError"
    except ValueError:
        return "error", "ValueError"


@pytest.mark.parametrize("data", LOADS_CASES, ids=range(len(LOADS_CASES)))
def test_loads_gives_what_json_loads_gives(data: bytes) -> None:
    """Same objects (ints stay ints past 64 bits, NaN and lone surrogates accepted) or the same
    kind of failure: the monitored route's counters and verdicts cannot tell the parsers apart."""
    got, want = _outcome(loads, data), _outcome(json.loads, data)
    assert got[0] == want[0]
    if got[0] == "ok":
        assert got[1] == want[1]


@pytest.fixture(scope="module")
def proxy(scripted: tuple[ScriptedUpstream, str]) -> Iterator[Proxy]:
    with running_proxy(proxy_config(scripted[1])) as p:
        yield p


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("TRACE", "/v1/models", 405),  # not a pass-through method: the router's 405
        ("GET", "/v1", 307),  # the router's slash redirect to /v1/
        ("GET", "/v1/a%0Ab", 404),  # a line break: /v1/{path:path} does not match
        ("POST", "/healthz", 405),
        ("GET", "/v2/models", 404),
    ],
)
def test_requests_outside_the_forwarded_routes_still_get_the_routers_answer(
    proxy: Proxy, method: str, path: str, status: int
) -> None:
    with httpx.Client(timeout=10, follow_redirects=False) as c:
        r = c.request(method, f"{proxy.url}{path}")
    assert r.status_code == status


def test_get_on_the_chat_path_is_passed_through_unmonitored(
    scripted: tuple[ScriptedUpstream, str], proxy: Proxy
) -> None:
    app, url = scripted
    sid = app.add(Script([b'{"object": "list"}'], headers=[(b"content-type", b"application/json")]))
    with httpx.Client(timeout=10) as c:
        direct = c.get(f"{url}/v1/chat/completions", headers={"x-script": sid})
        proxied = c.get(f"{proxy.url}/v1/chat/completions", headers={"x-script": sid})
    assert (
        (proxied.status_code, proxied.content)
        == (direct.status_code, direct.content)
        == (200, b'{"object": "list"}')
    )


def test_small_pass_through_reply_cut_off_aborts_the_client_response(
    scripted: tuple[ScriptedUpstream, str], proxy: Proxy
) -> None:
    """A pass-through reply with a small Content-Length is read whole before it is sent: an
    upstream that breaks it off still breaks the client's response off, as a direct call sees
    it, and is counted as a broken stream."""
    app, url = scripted
    headers = [(b"content-type", b"application/json"), (b"content-length", b"100")]
    sid = app.add(Script([b'{"partial": '], headers=headers, cut=True))
    before = (
        proxy.registry.get_sample_value("handoffmon_proxy_upstream_errors_total", {"kind": "stream"}) or 0
    )
    errors = []
    for base in (url, proxy.url):
        with pytest.raises(httpx.HTTPError) as info:
            httpx.post(f"{base}/v1/embeddings", json={"input": "x"}, headers={"x-script": sid}, timeout=10)
        errors.append(type(info.value))
    assert errors[0] is errors[1]
    after = proxy.registry.get_sample_value("handoffmon_proxy_upstream_errors_total", {"kind": "stream"})
    assert after == before + 1
    assert httpx.get(f"{proxy.url}/readyz").status_code == 200


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/embeddings"])
def test_a_bug_in_the_forwarder_is_answered_500_and_the_proxy_carries_on(
    scripted: tuple[ScriptedUpstream, str],
    proxy: Proxy,
    path: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The fast path has no ``ServerErrorMiddleware``: an unexpected exception before the
    response starts reaches the server, which answers 500 and logs it; later requests are served."""
    from handoffmon.proxy.forward import Forwarder

    original = Forwarder._forward

    async def boom(self: Forwarder, scope: dict[str, Any], *args: Any) -> None:
        if (b"x-boom", b"1") in scope["headers"]:
            raise RuntimeError("forwarder bug")
        await original(self, scope, *args)

    monkeypatch.setattr(Forwarder, "_forward", boom)
    app, _ = scripted
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(timeout=10) as c:
        failed = c.post(f"{proxy.url}{path}", json=body, headers={"x-boom": "1"})
        sid = app.add(Script([b'{"ok": true}'], headers=[(b"content-type", b"application/json")]))
        fine = c.post(f"{proxy.url}{path}", json=body, headers={"x-script": sid})
    assert failed.status_code == 500
    assert "forwarder bug" in caplog.text  # the server logged the exception
    assert (fine.status_code, fine.content) == (200, b'{"ok": true}')
