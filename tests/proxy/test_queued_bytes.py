"""``serve`` holds a turn's raw bodies until its pipeline has read them, within
``pipeline.max_queued_bytes``: with the attribution thread held up, large requests past the
budget are forwarded unchanged and shed from monitoring (counted as dropped), JSON and streamed
alike, and every byte is given back once the pipeline catches up."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from handoffmon.pipeline.attribution_stage import AttributionStage
from tests.proxy.conftest import Upstream, proxy_config, running_proxy

BODY_CHARS = 400_000
BUDGET = 1_048_576
"""Two ~400 KB requests fit (with their replies); the third passes the budget."""


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_large_requests_past_the_budget_are_forwarded_and_shed(
    upstream: Upstream, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    gate = threading.Event()
    handle = AttributionStage.handle

    def held_up(self: AttributionStage, item: Any) -> None:
        assert gate.wait(30)
        handle(self, item)

    monkeypatch.setattr(AttributionStage, "handle", held_up)
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
        gate.set()
        assert monitor.flush(20)
        counts = monitor.snapshot()
        assert monitor.queued_bytes.held == 0
    assert 2 * BODY_CHARS < held <= BUDGET  # the two turns queued, nothing of the others
    assert dropped == 3 and counts.dropped == 3
    assert sum(counts.turns.values()) == 2
    assert all((b"data: [DONE]" in body) is stream for body in replies)  # every reply forwarded whole
