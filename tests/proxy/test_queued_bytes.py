"""``serve`` holds a turn's raw bodies until its pipeline has read them, within
``pipeline.max_queued_bytes``: with the attribution thread held up, large requests past the
budget are forwarded unchanged and shed from monitoring (counted as dropped), JSON and streamed
alike, and every byte is given back once the pipeline catches up. No request body is parsed on
the serving loop: every parse runs on the attribution thread, error replies' included."""

from __future__ import annotations

import itertools
import json
import threading
import tracemalloc
from typing import Any

import httpx
import pytest

from handoffmon.pipeline.attribution_stage import AttributionStage
from handoffmon.proxy import forward
from tests.proxy.conftest import Proxy, Upstream, proxy_config, running_proxy

BODY_CHARS = 400_000
BUDGET = 1_048_576
"""Two ~400 KB requests fit (with their replies); the third passes the budget."""


def _hold_up(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, list[str]]:
    """Hold the attribution thread until the event is set; record the thread of every body
    parse in ``serve``."""
    gate, parsed_on = threading.Event(), []
    handle, loads = AttributionStage.handle, forward.loads

    def held_up(self: AttributionStage, item: Any) -> None:
        assert gate.wait(30)
        handle(self, item)

    def recorded(data: Any) -> Any:
        parsed_on.append(threading.current_thread().name)
        return loads(data)

    monkeypatch.setattr(AttributionStage, "handle", held_up)
    monkeypatch.setattr(forward, "loads", recorded)
    return gate, parsed_on


def _unmonitored(proxy: Proxy, reason: str) -> float:
    labels = {"reason": reason}
    return proxy.registry.get_sample_value("handoffmon_proxy_unmonitored_requests_total", labels) or 0.0


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_large_requests_past_the_budget_are_forwarded_and_shed(
    upstream: Upstream, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    gate, parsed_on = _hold_up(monkeypatch)
    cfg = proxy_config(upstream.url, pipeline={"max_queued_bytes": BUDGET})
    with running_proxy(cfg) as proxy, httpx.Client(base_url=proxy.url, timeout=30) as http:
        monitor = proxy.monitor
        replies = []
        for i in range(5):
            messages = [{"role": "user", "content": f"{i} " + "x" * BODY_CHARS}]
            r = http.post(
                "/v1/chat/completions", json={"model": "model-a", "messages": messages, "stream": stream}
            )
            assert r.status_code == 200
            replies.append(r.content)
        held = monitor.queued_bytes.held
        dropped = monitor.snapshot().dropped
        gauge = proxy.registry.get_sample_value
        gauges = [gauge("handoffmon_proxy_queued_bytes"), gauge("handoffmon_proxy_queued_bytes_limit")]
        gate.set()
        assert monitor.flush(20)
        counts = monitor.snapshot()
        assert monitor.queued_bytes.held == 0
        assert proxy.registry.get_sample_value("handoffmon_proxy_queued_bytes") == 0
    assert 2 * BODY_CHARS < held <= BUDGET  # the two turns queued, nothing of the others
    assert gauges == [held, BUDGET]  # what /metrics shows an operator
    assert dropped == 3 and counts.dropped == 3
    assert sum(counts.turns.values()) == 2
    assert all((b"data: [DONE]" in body) is stream for body in replies)  # every reply forwarded whole
    assert parsed_on and set(parsed_on) == {"handoffmon-attribution"}  # the two requests and replies


def test_error_replies_are_counted_off_the_loop_and_shed_as_unmonitored(
    upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five large requests the upstream refuses (429): their bodies are read on the attribution
    thread to count them; past the budget they are counted ``upstream_status`` unread, never as
    dropped turns (they are not turns)."""
    gate, parsed_on = _hold_up(monkeypatch)
    cfg = proxy_config(upstream.url, pipeline={"max_queued_bytes": BUDGET})
    with running_proxy(cfg) as proxy, httpx.Client(base_url=proxy.url, timeout=30) as http:
        before = _unmonitored(proxy, "upstream_status")
        for i in range(5):
            messages = [{"role": "user", "content": f"{i} " + "x" * BODY_CHARS}]
            r = http.post(
                "/v1/chat/completions",
                json={"model": "model-a", "messages": messages},
                headers={"x-mock-status": "429"},
            )
            assert r.status_code == 429
        shed = _unmonitored(proxy, "upstream_status") - before
        gate.set()
        assert proxy.monitor.flush(20)
        counted = _unmonitored(proxy, "upstream_status") - before
        counts = proxy.monitor.snapshot()
        assert proxy.monitor.queued_bytes.held == 0
    assert (shed, counted) == (3, 5)
    assert counts.dropped == 0 and sum(counts.turns.values()) == 0
    assert parsed_on == ["handoffmon-attribution"] * 2


EMPTY_MESSAGES = 100_000
"""``{"role": "user", "content": ""}`` messages of one request: 2.9 MB raw, ~25 MB parsed."""


def _parsed_bytes(body: bytes) -> int:
    """What ``serve``'s attribution thread keeps alive of ``body`` once parsed (tracemalloc):
    the JSON document and the request read from it."""
    from handoffmon.config import config_from_mapping
    from handoffmon.ingress import RequestParser

    parser = RequestParser.from_config(config_from_mapping({}))
    tracemalloc.start()
    try:
        doc = forward.loads(body)
        request = parser.http_body(doc, [], received_at=0.0)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert request is not None and len(request.messages) == EMPTY_MESSAGES + 1
    return held


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_burst_of_many_small_messages_is_weighed_as_parsed(
    upstream: Upstream, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    """A body of 100,000 empty messages is 2.9 MB raw but ~25 MB once parsed (measured here): a
    burst of five with the attribution thread held up queues only the turns whose parsed weight
    fits ``pipeline.max_queued_bytes``; the rest are forwarded and shed. Counted by raw bytes,
    all five were queued, holding ~125 MB parsed against a 64 MiB budget. Nothing is cut: a
    queued turn keeps its whole history."""
    budget = 64 * 1024 * 1024
    messages = [{"role": "system", "content": "s"}] + [{"role": "user", "content": ""}] * EMPTY_MESSAGES
    body = json.dumps({"model": "model-a", "messages": messages, "stream": stream}).encode()
    parsed = _parsed_bytes(body)
    assert parsed > 7 * len(body)  # what the budget used to miss
    gate, _ = _hold_up(monkeypatch)
    cfg = proxy_config(upstream.url, pipeline={"max_queued_bytes": budget})
    with running_proxy(cfg) as proxy, httpx.Client(base_url=proxy.url, timeout=60) as http:
        monitor = proxy.monitor
        for _ in range(5):
            r = http.post(
                "/v1/chat/completions",
                content=body,
                headers={"content-type": "application/json"},
            )
            assert r.status_code == 200
        held, dropped = monitor.queued_bytes.held, monitor.snapshot().dropped
        gate.set()
        assert monitor.flush(60)
        counts = monitor.snapshot()
        assert monitor.queued_bytes.held == 0
    queued = 5 - dropped
    assert queued >= 1 and dropped >= 1
    assert held <= budget
    assert held >= queued * (len(body) + parsed)  # each queued turn weighs what it will keep alive
    assert sum(counts.turns.values()) == queued
    (depth,) = {k.depth_bucket for k in counts.turns}
    assert depth == "1"  # the whole history read: nothing capped


def test_small_bodies_weigh_their_parsed_objects_once_turns_back_up(
    upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bodies under 64 KiB weigh their raw bytes while the attribution thread keeps up (the
    count stays off the usual request path), and their parsed objects too once 16 turns wait."""
    from handoffmon.pipeline.monitor import UNWEIGHED_TURNS

    messages = [{"role": "user", "content": ""}] * 400
    body = json.dumps({"model": "model-a", "messages": messages}).encode()
    assert 4096 < len(body) < forward.WEIGHED_BODY_BYTES
    gate, _ = _hold_up(monkeypatch)
    with running_proxy(proxy_config(upstream.url)) as proxy, httpx.Client(base_url=proxy.url) as http:
        held = []
        for _ in range(UNWEIGHED_TURNS + 4):
            r = http.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
            assert r.status_code == 200
            held.append(proxy.monitor.queued_bytes.held)
        gate.set()
        assert proxy.monitor.flush(30)
    steps = [b - a for a, b in itertools.pairwise([0, *held])]
    raw, parsed = steps[0], steps[-1]  # request and reply bytes; then with the request's objects
    assert raw < 2 * len(body)
    assert parsed - raw == forward.PARSED_OBJECT_BYTES * body.count(b"{")
    assert steps[: UNWEIGHED_TURNS - 1] == [raw] * (UNWEIGHED_TURNS - 1)


def test_a_compressed_body_too_large_once_parsed_is_not_parsed(
    upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gzip request body is queued at its compressed size (its inflated size is known only on
    the attribution thread): ~30 KB that inflate to 100,000 empty messages, ~25 MB once parsed,
    against a 4 MiB budget. It is forwarded and counted ``too_large``, never parsed; before, the
    attribution thread parsed it whole. A compressed body that fits is still read."""
    import gzip

    budget = 4 * 1024 * 1024
    messages = [{"role": "user", "content": ""}] * EMPTY_MESSAGES
    big = gzip.compress(json.dumps({"model": "model-a", "messages": messages}).encode(), mtime=0)
    small = gzip.compress(json.dumps({"model": "model-a", "messages": messages[:3]}).encode(), mtime=0)
    assert len(big) < 64 * 1024  # queued at this weight
    parsed: list[int] = []
    loads = forward.loads

    def recorded(data: Any) -> Any:
        parsed.append(len(data))
        return loads(data)

    monkeypatch.setattr(forward, "loads", recorded)
    cfg = proxy_config(upstream.url, pipeline={"max_queued_bytes": budget})
    headers = {"content-type": "application/json", "content-encoding": "gzip"}
    with running_proxy(cfg) as proxy, httpx.Client(base_url=proxy.url, timeout=60) as http:
        assert http.post("/v1/chat/completions", content=big, headers=headers).status_code == 200
        assert http.post("/v1/chat/completions", content=small, headers=headers).status_code == 200
        assert proxy.monitor.flush(60)
        counts = proxy.monitor.snapshot()
        assert _unmonitored(proxy, "too_large") == 1
    assert sum(counts.turns.values()) == 1  # the small one
    assert max(parsed) < 1024 * 1024  # requests and replies; never the 2.8 MB inflated body
