"""Pins the memory store: batch get/put, LRU by conversation, TTL, state, threads, the cap."""

from __future__ import annotations

import pytest

from handoffmon.attribution import Attributor
from handoffmon.protocols import AttributionStore, Authorship
from handoffmon.stores.memory import MemoryStore
from handoffmon.testing import FakeClock
from tests.stores.helpers import run_in_threads


def _auth(conv: str, depth: int = 1, author: str = "gpt-4o") -> Authorship:
    return Authorship((author,), depth, 0.0, conv)


def test_satisfies_the_protocol() -> None:
    """MemoryStore is an AttributionStore."""
    assert isinstance(MemoryStore(), AttributionStore)


def test_batch_put_and_get_in_order() -> None:
    """get_many returns values in key order, None for unknown keys."""
    store = MemoryStore()
    store.put_many([("a", _auth("c1")), ("b", _auth("c1", 2))])
    assert store.get_many(["b", "zz", "a"]) == [_auth("c1", 2), None, _auth("c1")]


def test_conversation_keys_are_evicted_together() -> None:
    """Over the cap, the least recently used conversation loses all its keys at once."""
    store = MemoryStore(max_conversations=2)
    store.put_many([("a1", _auth("A")), ("a2", _auth("A", 2))])
    store.put_many([("b1", _auth("B"))])
    store.put_many([("c1", _auth("C"))])
    assert store.get_many(["a1", "a2", "b1", "c1"]) == [None, None, _auth("B"), _auth("C")]
    assert len(store) == 2 and store.evicted == 1


def test_reads_refresh_recency() -> None:
    """A conversation read recently survives eviction over one written earlier."""
    store = MemoryStore(max_conversations=2)
    store.put_many([("a1", _auth("A"))])
    store.put_many([("b1", _auth("B"))])
    store.get_many(["a1"])
    store.put_many([("c1", _auth("C"))])
    assert store.get_many(["a1", "b1"]) == [_auth("A"), None]


def test_keys_without_conversation_are_their_own_group() -> None:
    """Collision markers (no conversation id) count and evict individually."""
    store = MemoryStore(max_conversations=3)
    store.put_many([(f"m{i}", Authorship((), 0, 0.0, "")) for i in range(5)])
    assert len(store) == 3 and store.key_count == 3


def test_key_moving_to_another_conversation_leaves_the_old_group() -> None:
    """Re-recording a key under a new conversation removes it from the old one's group."""
    store = MemoryStore(max_conversations=5)
    store.put_many([("k", _auth("A"))])
    store.put_many([("k", _auth("B"))])
    assert len(store) == 1 and store.get_many(["k"]) == [_auth("B")]


def test_ttl_expires_keys_and_state_after_last_write() -> None:
    """Keys and state vanish ttl_s after their last write; a rewrite restarts the clock."""
    clock = FakeClock()
    store = MemoryStore(ttl_s=10, clock=clock)
    store.put_many([("a", _auth("A")), ("b", _auth("B"))])
    store.put_state("A", {"x": 1})
    clock.now += 6
    store.put_many([("b", _auth("B"))])
    clock.now += 6
    assert store.get_many(["a", "b"]) == [None, _auth("B")]
    assert store.get_state("A") is None
    clock.now += 11
    store.put_many([("c", _auth("C"))])  # a write sweeps expired groups
    assert len(store) == 1


def test_state_roundtrip_is_a_copy() -> None:
    """put_state/get_state keep a copy: later mutation of either side does not leak."""
    store = MemoryStore()
    state = {"last": {"rule": "pass"}}
    store.put_state("c", state)
    state["new"] = 1
    got = dict(store.get_state("c") or {})
    assert got == {"last": {"rule": "pass"}}
    assert store.get_state("missing") is None


def test_state_counts_toward_the_cap() -> None:
    """Conversation state lives in the conversation's group and is evicted with it."""
    store = MemoryStore(max_conversations=1)
    store.put_state("A", {"x": 1})
    store.put_many([("b", _auth("B"))])
    assert store.get_state("A") is None and len(store) == 1


def test_concurrent_writers_and_readers() -> None:
    """Many threads writing and reading never corrupt the store or exceed the cap."""
    store = MemoryStore(max_conversations=50)

    def work(t: int) -> None:
        for i in range(2000):
            conv = f"c{t}-{i % 80}"
            store.put_many([(f"{conv}:{i}", _auth(conv, i))])
            store.get_many([f"{conv}:{i}", f"{conv}:{i - 1}"])
            store.put_state(conv, {"i": i})

    errors = run_in_threads(work, 4)
    assert errors == []
    assert len(store) <= 50
    assert store.key_count == sum(len(g.keys) for g in store._groups.values())


def test_invalid_bounds_are_rejected() -> None:
    """A zero cap or TTL is a configuration error, not a silent no-op."""
    with pytest.raises(ValueError):
        MemoryStore(max_conversations=0)


def _run_turns(store: MemoryStore, turns: int, conversations: int, per_conversation: int) -> None:
    attributor = Attributor(store, pending_max=1000)
    for c in range(conversations):
        history: list[dict[str, str]] = []
        for k in range(per_conversation):
            history.append({"role": "user", "content": f"conversation {c} question {k}"})
            ctx = attributor.attribute(history)
            reply = f"answer {k} for conversation {c}, long enough to get a content key"
            attributor.persist(attributor.record(ctx, reply, ["m"]))
            history.append({"role": "assistant", "content": reply})
            turns -= 1
            if not turns:
                return
            assert len(store) <= store.max_conversations


def test_many_turns_stay_under_the_cap() -> None:
    """20k turns through a store capped at 1k conversations leave it at the cap."""
    store = MemoryStore(max_conversations=1_000)
    _run_turns(store, 20_000, 5_000, 4)
    assert len(store) == 1_000
    assert store.key_count <= 1_000 * 2 * 4


@pytest.mark.slow
def test_200k_turns_stay_under_10k_conversations() -> None:
    """The issue's bound: 200k turns through a store capped at 10k conversations."""
    store = MemoryStore(max_conversations=10_000)
    _run_turns(store, 200_000, 50_000, 4)
    assert len(store) == 10_000
    assert store.key_count <= 10_000 * 2 * 4
