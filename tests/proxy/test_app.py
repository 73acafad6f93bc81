"""``handoffmon serve`` in front of a LiteLLM-like mock: real OpenAI SDK, byte identity, bad input."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from handoffmon.counts import TurnKey
from handoffmon.depth import DepthBuckets
from handoffmon.pipeline.aggregates import handoff_label
from tests.conftest import free_port
from tests.proxy.conftest import Proxy, Upstream, proxy_config, running_proxy
from tests.proxy.mock_upstream import reply_text, schedule

TURNS = 10
CANONICAL = {"dep-a-1": "model-a", "dep-b-1": "model-b"}


@pytest.fixture(scope="module")
def proxy(upstream: Upstream) -> Iterator[Proxy]:
    cfg = proxy_config(
        upstream.url,
        attribution={"canonical_models": CANONICAL},
        proxy={"max_body_bytes": 64 * 1024, "upstream_timeout_s": 0.5},
    )
    with running_proxy(cfg) as p:
        yield p


def expected_turns(n: int) -> Counter[TurnKey]:
    """The turn cells the mock's schedule produces for depths 1..n."""
    buckets = DepthBuckets()  # the proxy runs with the default buckets
    out: Counter[TurnKey] = Counter()
    for d in range(1, n + 1):
        model, prefix = schedule(d), ("none" if d == 1 else schedule(d - 1))
        handoff = "false" if d == 1 else handoff_label(prefix != model)
        out[TurnKey(model, prefix, buckets.bucket(d), handoff)] += 1
    return out


def delta(after: dict, before: dict) -> Counter:  # type: ignore[type-arg]
    c = Counter(after)
    c.subtract(before)
    return +c


def _turns(proxy: Proxy) -> dict[TurnKey, int]:
    assert proxy.monitor.flush(10)
    return dict(proxy.monitor.snapshot().turns)


def _attributions(proxy: Proxy) -> dict[str, int]:
    return dict(proxy.monitor.snapshot().attributions)


def test_sync_sdk_ten_turns_records_authorship_depth_and_handoffs(proxy: Proxy) -> None:
    """OpenAI SDK (sync, JSON): 10 turns; every turn's author, prefix, depth bucket and handoff counted."""
    before_turns, before_attr = _turns(proxy), _attributions(proxy)
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk-test", max_retries=0)
    messages: list[dict[str, str]] = []
    for d in range(1, TURNS + 1):
        messages.append({"role": "user", "content": f"question {d} (sync)"})
        resp = client.chat.completions.create(model="group", messages=messages)  # type: ignore[arg-type]
        text = resp.choices[0].message.content
        assert text == reply_text(schedule(d), d)
        assert resp.model == schedule(d)
        messages.append({"role": "assistant", "content": text or ""})
    client.close()
    assert delta(_turns(proxy), before_turns) == expected_turns(TURNS)
    attr = delta(_attributions(proxy), before_attr)
    assert attr.get("unknown", 0) == 0
    assert sum(attr.values()) == TURNS * (TURNS - 1) // 2  # every earlier assistant message, every turn


async def test_async_sdk_streaming_ten_turns(proxy: Proxy) -> None:
    """OpenAI SDK (async, streaming): the streamed reply is rebuilt and attributed on the next turn."""
    before_turns, before_attr = _turns(proxy), _attributions(proxy)
    client = openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key="sk-test", max_retries=0)
    messages: list[dict[str, str]] = []
    for d in range(1, TURNS + 1):
        messages.append({"role": "user", "content": f"question {d} (async stream)"})
        stream = await client.chat.completions.create(model="group", messages=messages, stream=True)  # type: ignore[arg-type]
        parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
        assert "".join(parts) == reply_text(schedule(d), d)
        messages.append({"role": "assistant", "content": "".join(parts)})
    await client.close()
    assert delta(await asyncio.to_thread(_turns, proxy), before_turns) == expected_turns(TURNS)
    attr = delta(_attributions(proxy), before_attr)
    assert attr.get("unknown", 0) == 0 and sum(attr.values()) == TURNS * (TURNS - 1) // 2


async def test_async_sdk_json_with_conversation_header(proxy: Proxy) -> None:
    """OpenAI SDK (async, JSON) with X-Conversation-Id: turns counted, ids from the caller."""
    before_turns = await asyncio.to_thread(_turns, proxy)
    client = openai.AsyncOpenAI(
        base_url=f"{proxy.url}/v1",
        api_key="sk-test",
        max_retries=0,
        default_headers={"X-Conversation-Id": "conv-async-json"},
    )
    messages: list[dict[str, str]] = []
    for d in range(1, TURNS + 1):
        messages.append({"role": "user", "content": f"question {d} (async json)"})
        resp = await client.chat.completions.create(model="group", messages=messages)  # type: ignore[arg-type]
        messages.append({"role": "assistant", "content": resp.choices[0].message.content or ""})
    await client.close()
    assert delta(await asyncio.to_thread(_turns, proxy), before_turns) == expected_turns(TURNS)


def _filtered(headers: httpx.Headers) -> list[tuple[str, str]]:
    return sorted((k.lower(), v) for k, v in headers.multi_items() if k.lower() != "date")


@pytest.mark.parametrize("stream", [False, True])
def test_responses_are_byte_identical_to_upstream(proxy: Proxy, upstream: Upstream, stream: bool) -> None:
    """Same request direct and through the proxy: same status, same header list, same body bytes."""
    body = {
        "model": "group",
        "messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}],
        "stream": stream,
    }
    raw = json.dumps(body).encode()
    headers = {"content-type": "application/json", "authorization": "Bearer sk-secret"}
    with httpx.Client() as c:
        direct = c.post(f"{upstream.url}/v1/chat/completions", content=raw, headers=headers)
        proxied = c.post(f"{proxy.url}/v1/chat/completions", content=raw, headers=headers)
    assert proxied.status_code == direct.status_code == 200
    assert proxied.content == direct.content
    assert _filtered(proxied.headers) == _filtered(direct.headers)
    assert upstream.mock.seen[-1].headers["authorization"] == "Bearer sk-secret"


def test_other_v1_routes_pass_through_unchanged(proxy: Proxy, upstream: Upstream) -> None:
    """GET /v1/models and an unknown /v1 path return exactly what the upstream returns."""
    with httpx.Client() as c:
        for path in ("/v1/models", "/v1/does-not-exist?x=1"):
            direct = c.get(f"{upstream.url}{path}")
            proxied = c.get(f"{proxy.url}{path}")
            assert (proxied.status_code, proxied.content) == (direct.status_code, direct.content)
            assert _filtered(proxied.headers) == _filtered(direct.headers)


def test_unknown_route_outside_v1_is_a_clear_404(proxy: Proxy) -> None:
    """Paths outside /v1 are not forwarded: 404 with an OpenAI-shaped error naming the path."""
    r = httpx.get(f"{proxy.url}/nope")
    assert r.status_code == 404
    assert "/nope" in r.json()["error"]["message"]
    assert httpx.get(f"{proxy.url}/healthz").status_code == 200


def _unmonitored(proxy: Proxy, reason: str) -> float:
    """The count once the monitor has handled what it was given (a JSON reply's bodies are
    parsed, and counted, on the attribution thread)."""
    assert proxy.monitor.flush(30)
    value = proxy.registry.get_sample_value("handoffmon_proxy_unmonitored_requests_total", {"reason": reason})
    return value or 0.0


def test_malformed_json_is_forwarded_unmonitored(proxy: Proxy, upstream: Upstream) -> None:
    """Broken JSON goes to the upstream unchanged (its answer returned), counted as bad_json."""
    before = _unmonitored(proxy, "bad_json")
    r = httpx.post(f"{proxy.url}/v1/chat/completions", content=b'{"model": "x", "messages": [')
    assert r.status_code == 400  # the upstream's own answer
    assert r.json()["error"]["type"] == "upstream_bad_request"
    assert upstream.mock.seen[-1].body == b'{"model": "x", "messages": ['
    assert _unmonitored(proxy, "bad_json") == before + 1
    assert httpx.get(f"{proxy.url}/readyz").status_code == 200


def test_json_turns_are_parsed_on_the_attribution_thread(
    proxy: Proxy, upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request path of a JSON chat completion only queues the bytes: both bodies are
    parsed on the attribution thread, and the turn is recorded as before."""
    import threading

    from handoffmon.proxy import forward

    threads: list[str] = []
    real = forward.loads

    def loads(data: bytes) -> object:
        threads.append(threading.current_thread().name)
        return real(data)

    monkeypatch.setattr(forward, "loads", loads)
    before = _turns(proxy)
    r = httpx.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "g", "messages": [{"role": "user", "content": "parsed where?"}]},
    )
    assert r.status_code == 200
    assert proxy.monitor.flush(30)
    assert threads == ["handoffmon-attribution", "handoffmon-attribution"]  # request, then reply
    assert sum(delta(_turns(proxy), before).values()) == 1


def test_bad_json_is_counted_when_the_upstream_is_unreachable(upstream: Upstream) -> None:
    """A body that is not a chat request is counted as such even when it never reaches the
    monitor (here: nothing listens upstream), as it was when every body was parsed up front."""
    cfg = proxy_config(f"http://127.0.0.1:{free_port()}")
    with running_proxy(cfg) as p:
        r = httpx.post(f"{p.url}/v1/chat/completions", content=b'{"model": "x", "messages": [')
        assert r.status_code == 502
        assert _unmonitored(p, "bad_json") == 1
        assert _unmonitored(p, "upstream_status") == 0


def test_missing_messages_is_forwarded_unmonitored(proxy: Proxy, upstream: Upstream) -> None:
    """A JSON body without ``messages`` is forwarded unchanged and counted as no_messages."""
    before = _unmonitored(proxy, "no_messages")
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        client.post("/chat/completions", body={"model": "group"}, cast_to=object)
    assert info.value.status_code == 400
    assert json.loads(upstream.mock.seen[-1].body) == {"model": "group"}
    assert _unmonitored(proxy, "no_messages") == before + 1


def test_oversized_body_gets_413_and_is_not_forwarded(proxy: Proxy, upstream: Upstream) -> None:
    """A body over proxy.max_body_bytes: 413 with a message naming the limit; upstream never sees it."""
    seen = len(upstream.mock.seen)
    big = json.dumps({"model": "g", "messages": [{"role": "user", "content": "x" * 70_000}]})
    r = httpx.post(f"{proxy.url}/v1/chat/completions", content=big)
    assert r.status_code == 413
    assert "max_body_bytes" in r.json()["error"]["message"]
    assert len(upstream.mock.seen) == seen

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is enforced while reading
        for _ in range(10):
            yield b"y" * 10_000

    r = httpx.post(f"{proxy.url}/v1/chat/completions", content=chunks())
    assert r.status_code == 413
    assert httpx.get(f"{proxy.url}/healthz").status_code == 200


def test_upstream_timeout_is_504(proxy: Proxy) -> None:
    """An upstream slower than proxy.upstream_timeout_s (0.5 s): 504 with a clear JSON error."""
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0)
    t0 = time.monotonic()
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(
            model="g", messages=[{"role": "user", "content": "slow"}], extra_headers={"x-mock-delay-s": "2"}
        )
    assert time.monotonic() - t0 < 1.5
    assert info.value.status_code == 504
    assert "upstream_timeout_s" in info.value.message
    assert proxy.registry.get_sample_value("handoffmon_proxy_upstream_errors_total", {"kind": "timeout"}) >= 1


def test_upstream_5xx_passes_through(proxy: Proxy, upstream: Upstream) -> None:
    """An upstream 503 reaches the client unchanged (status, retry-after, body); nothing recorded."""
    before = _turns(proxy)
    req = {"model": "g", "messages": [{"role": "user", "content": "x"}]}
    headers = {"x-mock-status": "503"}
    direct = httpx.post(f"{upstream.url}/v1/chat/completions", json=req, headers=headers)
    proxied = httpx.post(f"{proxy.url}/v1/chat/completions", json=req, headers=headers)
    assert proxied.status_code == 503
    assert proxied.content == direct.content
    assert proxied.headers["retry-after"] == "1"
    assert _turns(proxy) == before


def test_metrics_health_and_token(upstream: Upstream) -> None:
    """/metrics needs the bearer token when telemetry.metrics_token is set; /healthz and /readyz never do."""
    cfg = proxy_config(upstream.url, telemetry={"metrics_token": "s3cret"})
    with running_proxy(cfg) as p:
        httpx.post(
            f"{p.url}/v1/chat/completions",
            json={"model": "g", "messages": [{"role": "user", "content": "hi"}]},
            headers={"authorization": "Bearer sk-user-key"},
        )
        assert httpx.get(f"{p.url}/metrics").status_code == 401
        assert httpx.get(f"{p.url}/metrics", headers={"authorization": "Bearer wrong"}).status_code == 401
        assert httpx.post(f"{p.url}/admin/flush").status_code == 401
        ok = httpx.post(f"{p.url}/admin/flush", headers={"authorization": "Bearer s3cret"})
        assert ok.json() == {"flushed": True}
        r = httpx.get(f"{p.url}/metrics", headers={"authorization": "Bearer s3cret"})
        assert r.status_code == 200
        assert 'handoffmon_proxy_requests_total{route="chat_completions",status_class="2xx"} 1.0' in r.text
        assert (
            'handoffmon_turns_total{depth_bucket="1",model="openai/model-a",prefix_model="none"} 1.0'
            in r.text
        )
        assert "sk-user-key" not in r.text
        om = httpx.get(
            f"{p.url}/metrics",
            headers={"authorization": "Bearer s3cret", "accept": "application/openmetrics-text"},
        )
        assert om.headers["content-type"].startswith("application/openmetrics-text")
        assert om.text.rstrip().endswith("# EOF")
        assert httpx.get(f"{p.url}/healthz").status_code == 200
        assert httpx.get(f"{p.url}/readyz").json()["status"] == "ready"


def test_shutdown_closes_the_monitor_after_counting_every_turn(upstream: Upstream) -> None:
    """Server exit runs the lifespan drain: the proxy's own monitor is closed with all turns counted."""
    with running_proxy(proxy_config(upstream.url)) as p:
        for i in range(5):
            body = {"model": "g", "messages": [{"role": "user", "content": f"drain {i}"}]}
            assert httpx.post(f"{p.url}/v1/chat/completions", json=body).status_code == 200
        monitor = p.monitor
    assert monitor.closed
    assert monitor.snapshot().total_turns == 5


def test_gzip_reply_passes_compressed_and_is_still_monitored(proxy: Proxy, upstream: Upstream) -> None:
    """A gzip-encoded upstream body reaches the client byte-identical; the monitor reads a decoded copy."""
    before = _turns(proxy)
    body = {"model": "g", "messages": [{"role": "user", "content": "zip it"}]}
    headers = {"x-mock-gzip": "1", "accept-encoding": "gzip"}
    raw: dict[str, bytes] = {}
    with httpx.Client() as c:
        for name, base in (("direct", upstream.url), ("proxied", proxy.url)):
            with c.stream("POST", f"{base}/v1/chat/completions", json=body, headers=headers) as r:
                assert r.headers["content-encoding"] == "gzip"
                raw[name] = b"".join(r.iter_raw())
    assert raw["proxied"] == raw["direct"]
    assert json.loads(gzip.decompress(raw["proxied"]))["object"] == "chat.completion"
    assert sum(delta(_turns(proxy), before).values()) == 1


def test_unreachable_upstream_is_502(upstream: Upstream) -> None:
    """Nothing listening upstream: 502 with code upstream_connect; /healthz still 200."""
    cfg = proxy_config(f"http://127.0.0.1:{free_port()}")
    with running_proxy(cfg) as p:
        r = httpx.post(
            f"{p.url}/v1/chat/completions",
            json={"model": "g", "messages": [{"role": "user", "content": "x"}]},
        )
        assert r.status_code == 502
        assert r.json()["error"]["code"] == "upstream_connect"
        assert httpx.get(f"{p.url}/healthz").status_code == 200


def test_auth_headers_never_reach_logs_or_metrics(
    proxy: Proxy, upstream: Upstream, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """A canary API key on good, malformed, failing and timed-out requests is forwarded but never logged."""
    caplog.set_level(logging.DEBUG)
    canary = "sk-canary-7f3a9c"
    headers = {"authorization": f"Bearer {canary}", "api-key": canary}
    good = {"model": "g", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(headers=headers, timeout=5) as c:
        assert c.post(f"{proxy.url}/v1/chat/completions", json=good).status_code == 200
        c.post(f"{proxy.url}/v1/chat/completions", content=b"{broken")
        c.post(f"{proxy.url}/v1/chat/completions", json=good, headers={"x-mock-status": "500"})
        c.post(f"{proxy.url}/v1/chat/completions", json=good, headers={"x-mock-delay-s": "1"})
        c.get(f"{proxy.url}/nowhere")
    assert upstream.mock.seen[-1].headers["api-key"] == canary  # forwarded
    assert proxy.monitor.flush(10)
    out, err = capfd.readouterr()
    assert canary not in caplog.text + out + err
    assert canary not in httpx.get(f"{proxy.url}/metrics").text


def test_absurdly_nested_json_is_forwarded_not_a_crash(proxy: Proxy, upstream: Upstream) -> None:
    """30k nested brackets (json.loads raises RecursionError) are forwarded like any bad JSON."""
    before = _unmonitored(proxy, "bad_json")
    body = b"[" * 30_000 + b"]" * 30_000
    r = httpx.post(f"{proxy.url}/v1/chat/completions", content=body)
    assert r.status_code == 400  # the upstream's answer, not a proxy 500
    assert _unmonitored(proxy, "bad_json") == before + 1


@pytest.mark.parametrize("header", ["X-Conversation-Id", "x-litellm-session-id"])
def test_conversation_id_headers_key_the_conversation_state(proxy: Proxy, header: str) -> None:
    """X-Conversation-Id or LiteLLM's session header becomes the id the monitor keys state by."""
    cid = f"conv-{header.lower()}"
    body = {"model": "g", "messages": [{"role": "user", "content": f"hello via {header}"}]}
    assert httpx.post(f"{proxy.url}/v1/chat/completions", json=body, headers={header: cid}).status_code == 200
    assert proxy.monitor.flush(10)
    assert proxy.monitor.store.get_state(cid) is not None
    assert proxy.monitor.store.get_state("conv-never-sent") is None


def test_readyz_sees_the_store_back_without_traffic(upstream: Upstream) -> None:
    """Redis (a private server) stops: after a failed call ``/readyz`` says ``failing_open``;
    once Redis is back, ``/readyz`` itself pings the store (off the event loop, throttled) and
    says ``ok`` again with no request in between (it stayed ``failing_open`` until traffic)."""
    from handoffmon.errors import StoreError
    from tests.stores.redis_server import RedisServer

    with RedisServer() as server:
        store = {"backend": "redis", "url": server.url, "timeout_s": 0.2, "backoff_s": 0.2}
        with running_proxy(proxy_config(upstream.url, store=store)) as p:
            assert httpx.get(f"{p.url}/readyz").json()["store"] == "ok"
            server.stop()
            with pytest.raises(StoreError):
                p.monitor.store.get_state("probe")
            assert httpx.get(f"{p.url}/readyz").json()["store"] == "failing_open"
            server.start()
            deadline = time.monotonic() + 10
            seen = []
            while time.monotonic() < deadline:
                seen.append(httpx.get(f"{p.url}/readyz").json()["store"])
                if seen[-1] == "ok":
                    break
                time.sleep(0.3)
            assert seen[-1] == "ok", seen
            assert sum(p.monitor.snapshot().turns.values()) == 0  # no traffic needed


def test_admin_flushes_wait_one_at_a_time_on_their_own_thread(
    upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst of POST /admin/flush runs the flush waits one at a time on serve's own admin
    thread: before, each took a thread of the loop's default executor (6 on two cores), which the
    upstream client's DNS lookups and /readyz's store ping share, for up to
    pipeline.shutdown_timeout_s each."""
    with running_proxy(proxy_config(upstream.url)) as p:
        running: list[int] = [0]
        seen: list[tuple[int, str]] = []
        lock = threading.Lock()
        real = p.monitor.flush

        def slow_flush(timeout_s: float | None = None) -> bool:
            with lock:
                running[0] += 1
                seen.append((running[0], threading.current_thread().name))
            time.sleep(0.1)
            with lock:
                running[0] -= 1
            return bool(real(timeout_s))

        monkeypatch.setattr(p.monitor, "flush", slow_flush)
        answers: list[Any] = []
        threads = [
            threading.Thread(target=lambda: answers.append(httpx.post(f"{p.url}/admin/flush", timeout=30)))
            for _ in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert [a.json() for a in answers] == [{"flushed": True}] * 8
        assert len(seen) == 8
        assert max(n for n, _ in seen) == 1
        assert {name.split("_")[0] for _, name in seen} == {"handoffmon-admin"}
