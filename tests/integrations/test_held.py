"""Turns waiting for the attribution thread keep their requests' messages alive; large ones are
weighed against ``pipeline.max_queued_bytes`` (``integrations.held``), so a burst of large
histories while attribution is slow holds a bounded amount of memory, and the turns beyond the
budget are dropped and counted, never blocking or failing the application's call."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import httpx
import openai
import pytest

from handoffmon.checkers import RuleSet, default_registry
from handoffmon.config import RuleConfig
from handoffmon.integrations.held import MESSAGE_BYTES, SMALL_BYTES, held_bytes
from handoffmon.integrations.openai_client import OpenAIClientWrapper
from handoffmon.integrations.router import RouterWrapper
from handoffmon.pipeline.monitor import UNWEIGHED_TURNS
from handoffmon.protocols import Authorship
from handoffmon.stores.memory import MemoryStore
from handoffmon.testing import RecordingExporter
from tests.integrations.openai_mock import Upstream
from tests.pipeline.helpers import make_config, monitor

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

BUDGET = 4 * 1024 * 1024
CONFIG = make_config(pipeline={"max_queued_bytes": BUDGET, "attribution_queue_size": 1000})
PAYLOAD = 512 * 1024  # characters of one request's fresh content
CALLS = 40  # 20 MiB of payloads: five times the budget


class HeldStore(MemoryStore):
    """A memory store whose lookups wait until ``go`` is set: the attribution thread stalls."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()

    def get_many(self, keys: Sequence[str]) -> list[Authorship | None]:
        self.go.wait(30)
        return super().get_many(keys)


def test_held_bytes_weighs_large_histories_only() -> None:
    """Small histories weigh nothing; a long list, a long string and a base64 image part weigh
    about their size; hostile shapes weigh their slots and never raise."""
    assert held_bytes([{"role": "user", "content": "hi"}] * 100) == 0
    assert held_bytes([{"role": "user", "content": "x" * 100_000}]) == 8 + MESSAGE_BYTES + 100_000
    many = [{"role": "user", "content": "abcd"}] * 100_000
    assert held_bytes(many) == 100_000 * (8 + MESSAGE_BYTES + 4)
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 200_000}}
    assert held_bytes([{"role": "user", "content": [{"type": "text", "text": "see"}, image]}]) > 200_000
    assert held_bytes(None) == 0 and held_bytes("x" * SMALL_BYTES) == 0
    assert held_bytes([object()] * 10_000) == 80_000

    class Hostile(tuple):  # type: ignore[type-arg]
        def __len__(self) -> int:
            raise RuntimeError("no len")

    class Loud(dict):  # type: ignore[type-arg]
        def get(self, key: Any, default: Any = None) -> Any:
            raise RuntimeError("no get")

    assert held_bytes(Hostile(["x" * 100_000])) == 0
    assert held_bytes([Loud(content="x")] * 10_000) == 80_000


def test_many_empty_messages_weigh_what_they_keep_alive() -> None:
    """340,000 empty message dicts a server parsed from a request: their dicts and strings are
    what a queued turn keeps alive (measured with tracemalloc), not only the list's slots (8
    bytes each: 2.7 MB of ~80 MB)."""
    import json
    import tracemalloc

    payload = json.dumps([{"role": "user", "content": ""}] * 340_000)
    tracemalloc.start()
    try:
        messages = json.loads(payload)
        alive, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert alive > 60_000_000
    assert alive <= held_bytes(messages) <= 1.5 * alive


def _fresh(i: int) -> list[dict[str, Any]]:
    """A request as a server builds it from its payload: new objects each time."""
    return [{"role": "user", "content": f"{i} " + "y" * PAYLOAD}]


@pytest.mark.parametrize("mode", ["router", "router_stream", "client"])
def test_a_burst_of_large_requests_holds_at_most_the_byte_budget(mode: str) -> None:
    """While the attribution thread is stalled, 40 requests of 512 KiB each: every call returns
    its reply; the turns waiting hold at most ``max_queued_bytes`` besides the first
    ``UNWEIGHED_TURNS``, which found no backlog and were not scanned (``integrations.held.weigh``);
    the rest are dropped and counted; once attribution runs again, every turn is either recorded
    or counted."""
    from litellm import Router

    store, exp = HeldStore(), RecordingExporter()
    with monitor(CONFIG, store=store, exporters=[exp]) as m:
        if mode == "client":
            upstream = Upstream(headers={})
            http = httpx.Client(transport=httpx.MockTransport(upstream))
            raw = openai.OpenAI(api_key="k", base_url="http://u/v1", http_client=http)
            client = OpenAIClientWrapper(raw, m)
        else:
            params = {"model": "openai/gpt-m", "api_key": "k", "mock_response": "fine"}
            wrapped = RouterWrapper(Router(model_list=[{"model_name": "m", "litellm_params": params}]), m)
        peak = waiting = 0
        for i in range(CALLS):
            if mode == "client":
                reply = client.chat.completions.create(model="m", messages=_fresh(i))
                assert reply.choices[0].message.content == upstream.reply_text(i + 1)
            elif mode == "router":
                reply = wrapped.completion(model="m", messages=_fresh(i))
                assert reply.choices[0].message.content == "fine"
            else:
                stream = wrapped.completion(model="m", messages=_fresh(i), stream=True)
                assert "".join(c.choices[0].delta.content or "" for c in stream) == "fine"
            if i < UNWEIGHED_TURNS:
                assert m.queued_bytes.held == 0  # no backlog yet: not weighed, not scanned
            peak = max(peak, m.queued_bytes.held)
            waiting = max(waiting, m.stats["pending"])
        dropped = m.attribution_overflows
        store.go.set()
        assert m.flush(30)
        assert m.queued_bytes.held == 0  # every weight given back
    assert peak <= BUDGET
    assert peak >= BUDGET // 2  # the backlog was weighed
    # the requests kept alive: the unweighed ones, what the budget holds, one being attributed
    assert waiting <= UNWEIGHED_TURNS + BUDGET // PAYLOAD + 1
    assert dropped > 0  # the turns past the budget, counted
    assert len(exp.results) + dropped == CALLS


def test_a_backlog_in_the_checks_is_weighed_too() -> None:
    """The checks stall instead (a checker waits): turns pass attribution and wait for their
    check holding their last user message, so the backlog that weighs new turns counts the
    checks' queue too: past ``UNWEIGHED_TURNS`` waiting there, every new turn is weighed, and
    at most the budget's worth of them are held. Two check workers: the checks run on threads of
    their own, not after each attributed turn on the attribution thread."""
    from litellm import Router

    go = threading.Event()
    registry = default_registry()

    def factory(params: Any) -> Any:
        def check(reply: str, ctx: Any) -> bool:
            go.wait(30)
            return True

        return check

    registry.register("slow", factory)
    rules = RuleSet.from_config([RuleConfig(name="slow", check="slow")], registry=registry)
    exp = RecordingExporter()
    config = make_config(pipeline={"max_queued_bytes": BUDGET, "attribution_queue_size": 1000, "workers": 2})
    with monitor(config, rules=rules, exporters=[exp]) as m:
        params = {"model": "openai/gpt-m", "api_key": "k", "mock_response": "fine"}
        wrapped = RouterWrapper(Router(model_list=[{"model_name": "m", "litellm_params": params}]), m)
        peak = waiting = 0
        for i in range(CALLS):
            assert wrapped.completion(model="m", messages=_fresh(i)).choices[0].message.content == "fine"
            peak = max(peak, m.queued_bytes.held)
            waiting = max(waiting, m.stats["pending"])
        dropped = m.attribution_overflows
        go.set()
        assert m.flush(30)
        assert m.queued_bytes.held == 0
    assert BUDGET // 2 <= peak <= BUDGET
    assert waiting <= UNWEIGHED_TURNS + BUDGET // PAYLOAD + 1
    assert dropped > 0
    assert len(exp.results) + dropped == CALLS
