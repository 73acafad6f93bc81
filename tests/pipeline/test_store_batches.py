"""On Redis, the turns queued at once are attributed and checked in batches: three store calls
(round trips) per batch instead of three per turn, and the same results as one turn at a time.

SQLite keeps one turn at a time: batching its check stage was measured and not adopted
(docs/operations/performance-rounds.md, round "Redis turns in batches")."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import pytest
import redis

from handoffmon.config import HandoffmonConfig
from handoffmon.ingress import Outcome, Request, ResponseLink
from handoffmon.pipeline.monitor import Monitor
from handoffmon.protocols import AttributionStore
from handoffmon.stores import make_store
from handoffmon.stores.memory import MemoryStore
from handoffmon.stores.redis import MERGE_SCRIPT, RedisStore
from handoffmon.testing import RecordingExporter
from handoffmon.types import TurnResult
from tests.conftest import require_redis
from tests.pipeline.helpers import make_config, request, turn
from tests.stores.test_redis import CountingConnection

pytestmark = pytest.mark.integration

CONVERSATIONS = 8
DEPTH = 4


def _drive(m: Monitor, stored: bool = False) -> None:
    """CONVERSATIONS conversations of DEPTH turns, interleaved turn by turn, so one batch holds
    every turn of each; authors alternate by conversation (handoffs), replies pass or fail
    the ``short`` rule (transitions). ``stored``: as Responses API calls sending their whole
    history with ``store`` on (each reply also keyed by its response id, ADR 0011)."""
    histories: list[list[dict[str, Any]]] = [
        [{"role": "user", "content": f"conversation {i} opens"}] for i in range(CONVERSATIONS)
    ]
    for depth in range(DEPTH):
        for i, history in enumerate(histories):
            author = ("m1", "m2")[(i + depth * (i % 3)) % 2]
            reply = "fine" if (i + depth) % 3 else f"a reply of many more than five words {i} {depth}"
            if stored:
                cap = m.capture(request(m, history)._replace(link=ResponseLink(None, True)))
                m.finish(
                    cap,
                    {"role": "assistant", "content": reply},
                    Outcome((author,), response_id=f"r{i}.{depth}"),
                )
            else:
                turn(m, history, {"role": "assistant", "content": reply}, author)
            history += [{"role": "assistant", "content": reply}, {"role": "user", "content": f"next {depth}"}]


def _seen(results: list[TurnResult]) -> list[tuple[Any, ...]]:
    return [
        (
            r.context.conversation_id,
            r.context.depth,
            r.context.prefix_model,
            r.record.author,
            r.record.handoff,
            tuple(a.method for a in r.context.attributions),
            tuple((c.rule, c.verdict) for c in r.checks),
            tuple(r.transitions),
            tuple(r.cluster),
        )
        for r in results
    ]


def _counts(m: Monitor) -> dict[str, Any]:
    snap = asdict(m.snapshot())
    snap.pop("monitor_errors")
    return snap


class CountingStore:
    """Forwards to a store and counts its method calls by name."""

    def __init__(self, inner: AttributionStore) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.inner, name)
        if not callable(value) or name.startswith("_"):
            return value

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return value(*args, **kwargs)

        return counted


@pytest.fixture
def redis_config() -> Iterator[HandoffmonConfig]:
    """A config on Redis (the store whose calls are round trips: batched) under a key prefix of
    its own, deleted afterwards. A timeout of seconds, not the fail-open default of 50 ms: these
    tests compare batched attribution with one by one and assert no store failure, which a
    loaded CI host (load 10+ on 2 cores) made happen by timing calls out (4 store errors seen)."""
    require_redis()
    prefix = f"hm-test-{uuid.uuid4().hex}:"
    cfg = make_config(store={"backend": "redis", "key_prefix": prefix, "timeout_s": 5.0})
    yield cfg
    client = redis.Redis(host="127.0.0.1", port=6379)
    keys = client.keys(f"{cfg.store.key_prefix}*")
    if keys:
        client.delete(*keys)
    client.close()


@pytest.mark.parametrize("stored", [False, True], ids=["chat", "stored-responses"])
def test_queued_turns_cost_three_store_calls_per_batch_and_match_one_by_one(
    redis_config: HandoffmonConfig, stored: bool
) -> None:
    cfg = redis_config
    store = CountingStore(make_store(cfg.store))
    batched_exp, single_exp = RecordingExporter(), RecordingExporter()
    m = Monitor(cfg, exporters=[batched_exp], store=store, start=False)  # type: ignore[arg-type]
    reference = Monitor(make_config(), exporters=[single_exp], store=MemoryStore())
    try:
        _drive(m, stored)
        _drive(reference, stored)
        assert reference.flush(10)
        # attribution on this thread, in batches of up to 64: the checks queue up behind it
        assert m._front.run_pending() == CONVERSATIONS * DEPTH
        assert store.calls == {"get_many": 1}  # every history looked up at once
        m.start()  # the check thread takes the 32 queued turns as one batch
        assert m.flush(10)
        # every reply's keys merged and every state read in one call, the states written in one
        assert store.calls == {"get_many": 1, "merge_get_states": 1, "put_states_if": 1}
        assert len(batched_exp.results) == CONVERSATIONS * DEPTH
        assert _seen(batched_exp.results) == _seen(single_exp.results)
        assert _counts(m) == _counts(reference)
        assert m.snapshot().monitor_errors.get("store", 0) == 0
        assert sum(m.snapshot().transitions.values()) == CONVERSATIONS * (DEPTH - 1)
        assert {r.context.depth for r in batched_exp.results} == set(range(1, DEPTH + 1))
        # the states were written: a later turn of each conversation continues from them
        _drive_one_more(m, batched_exp)
    finally:
        m.close()
        reference.close()


def test_a_redis_batch_is_three_round_trips() -> None:
    """The store calls of a batch are one network round trip each (pipelines, one MGET)."""
    require_redis()
    cfg = make_config(store={"backend": "redis", "key_prefix": f"hm-test-{uuid.uuid4().hex}:"})
    client = redis.Redis(
        connection_pool=redis.ConnectionPool(host="127.0.0.1", port=6379, connection_class=CountingConnection)
    )
    client.script_load(MERGE_SCRIPT)  # connected, the script cached
    m = Monitor(cfg, exporters=[RecordingExporter()], store=RedisStore(cfg.store, client=client), start=False)
    try:
        _drive(m)
        before = CountingConnection.sends
        assert m._front.run_pending() == CONVERSATIONS * DEPTH
        assert CountingConnection.sends - before == 1
        m.start()
        assert m.flush(10)
        assert CountingConnection.sends - before == 3
        assert sum(m.snapshot().turns.values()) == CONVERSATIONS * DEPTH
    finally:
        m.close()
        client.delete(*client.keys(f"{cfg.store.key_prefix}*"))
        client.close()


def _drive_one_more(m: Monitor, exp: RecordingExporter) -> None:
    """Turn DEPTH + 1 of conversation 0, alone: read back from Redis, not from the batch."""
    results = [r for r in exp.results if r.context.depth == DEPTH]
    last = results[0]
    history: list[dict[str, Any]] = [{"role": "user", "content": "conversation 0 opens"}]
    for depth in range(DEPTH):
        reply = "fine" if depth % 3 else f"a reply of many more than five words 0 {depth}"
        history += [{"role": "assistant", "content": reply}, {"role": "user", "content": f"next {depth}"}]
    n = len(exp.results)
    turn(m, history, {"role": "assistant", "content": "fine"}, "m1")
    assert m.flush(10)
    (new,) = exp.results[n:]
    assert new.context.conversation_id == last.context.conversation_id
    assert new.context.depth == DEPTH + 1
    assert [t.from_verdict for t in new.transitions] == [last.checks[0].verdict]


def _drive_mixed(m: Monitor) -> None:
    """A batch with every kind of turn: a call that cannot be read, an unreadable history
    (degraded), a reply nobody is known to have served, around one conversation's turns."""

    def unreadable() -> None:
        raise RuntimeError("the integration could not read this call")

    history: list[dict[str, Any]] = [{"role": "user", "content": "mixed batch"}]
    turn(m, history, {"role": "assistant", "content": "first"}, "m1")
    m.finish_later(unreadable, ())
    m.finish(
        m.capture(Request(None, "group", None, {}, time.perf_counter())), "lost", Outcome(authors=("m2",))
    )
    history += [{"role": "assistant", "content": "first"}, {"role": "user", "content": "again"}]
    turn(m, history, {"role": "assistant", "content": "second, from an unknown server"}, None)
    history += [
        {"role": "assistant", "content": "second, from an unknown server"},
        {"role": "user", "content": "and again"},
    ]
    turn(m, history, {"role": "assistant", "content": "third"}, "m2")


def test_a_batch_of_mixed_turns_fails_open_turn_by_turn_as_one_by_one(
    redis_config: HandoffmonConfig,
) -> None:
    cfg = redis_config
    batched_exp, single_exp = RecordingExporter(), RecordingExporter()
    m = Monitor(cfg, exporters=[batched_exp], start=False)
    reference = Monitor(make_config(), exporters=[single_exp], store=MemoryStore())
    try:
        _drive_mixed(m)
        _drive_mixed(reference)
        assert reference.flush(10)
        assert m._front.run_pending() == 5  # one batch
        m.start()
        assert m.flush(10)
        assert len(batched_exp.results) == 4
        degraded = [r for r in batched_exp.results if r.context.degraded]
        assert len(degraded) == 1
        normal = [r for r in batched_exp.results if not r.context.degraded]
        assert [(r.context.depth, r.context.prefix_model, r.record.author) for r in normal] == [
            (1, "none", "m1"),
            (2, "m1", "unknown"),
            (3, "unknown", "m2"),
        ]

        def comparable(results: list[TurnResult]) -> list[tuple[Any, ...]]:
            return [s[1:] for s, r in zip(_seen(results), results, strict=True) if not r.context.degraded]

        assert comparable(batched_exp.results) == comparable(single_exp.results)
        errors = m.snapshot().monitor_errors
        assert errors == reference.snapshot().monitor_errors
        assert errors.get("integration") == 1 and not errors.get("pipeline") and not errors.get("store")
    finally:
        m.close()
        reference.close()


def _drive_chains(m: Monitor, by: str) -> None:
    """Responses API chains (ADR 0011): CONVERSATIONS chains of DEPTH calls, interleaved turn
    by turn, each carrying only its new input and naming the response it continues (``by``
    ``previous``) or its conversation object (``conversation``)."""
    previous: list[str | None] = [None] * CONVERSATIONS
    for depth in range(DEPTH):
        for i in range(CONVERSATIONS):
            author = ("m1", "m2")[(i + depth * (i % 3)) % 2]
            rid = f"resp_{i}_{depth}"
            req = request(m, [{"role": "user", "content": f"chain {i} call {depth}"}])
            link = (
                ResponseLink(previous[i], True) if by == "previous" else ResponseLink(None, True, f"conv_{i}")
            )
            cap = m.capture(req._replace(link=link))
            m.finish(
                cap,
                {"role": "assistant", "content": f"reply {i} {depth}"},
                Outcome((author,), response_id=rid),
            )
            previous[i] = rid


@pytest.mark.parametrize("by", ["previous", "conversation"])
def test_chained_calls_queued_in_one_batch_match_one_by_one(redis_config: HandoffmonConfig, by: str) -> None:
    """Continued responses in a batch are attributed after the response each continues was
    recorded (the overlay), as one by one on the memory store: depth, prefix, methods."""
    batched_exp, single_exp = RecordingExporter(), RecordingExporter()
    m = Monitor(redis_config, exporters=[batched_exp], start=False)
    reference = Monitor(make_config(), exporters=[single_exp], store=MemoryStore())
    try:
        _drive_chains(m, by)
        _drive_chains(reference, by)
        assert reference.flush(10)
        m.start()
        assert m.flush(10)
        assert _seen(batched_exp.results) == _seen(single_exp.results)
        assert [r.context.depth for r in batched_exp.results] == [
            d + 1 for d in range(DEPTH) for _ in range(CONVERSATIONS)
        ]
        assert all(a.method == "response_id" for r in batched_exp.results for a in r.context.attributions)
        assert m.snapshot().monitor_errors.get("store", 0) == 0
    finally:
        m.close()
        reference.close()


def test_turns_holding_large_bodies_are_read_a_few_megabytes_at_a_time(
    redis_config: HandoffmonConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turns carrying raw bodies (``weight``, as ``serve``'s) are read at most ``BATCH_BYTES`` of
    them per batch (here 1,000: four 400-byte turns in two lookups), so a batch of large bodies
    is never all parsed at once; the checks then take them as one batch and give every byte back."""
    from handoffmon.pipeline import attribution_stage

    monkeypatch.setattr(attribution_stage, "BATCH_BYTES", 1000)
    store = CountingStore(make_store(redis_config.store))
    exp = RecordingExporter()
    m = Monitor(redis_config, exporters=[exp], store=store, start=False)  # type: ignore[arg-type]
    try:
        for i in range(4):
            history = [
                {"role": "user", "content": f"large body {i}"},
                {"role": "assistant", "content": "earlier"},
                {"role": "user", "content": "and now"},
            ]
            cap = m.capture(request(m, history))
            m.finish(cap, {"role": "assistant", "content": "fine"}, Outcome(("m1",)), weight=400)
        assert m._front.run_pending() == 4
        assert store.calls == {"get_many": 2}
        assert m.queued_bytes.held == 1600  # waiting for the checks
        m.start()
        assert m.flush(10)
        assert m.queued_bytes.held == 0
        assert len(exp.results) == 4
    finally:
        m.close()
