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
    assert store.key_count == store.linked_key_count()


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


def test_compact_layout_matches_a_dict_under_random_writes_and_drops() -> None:
    """Fingerprint keys, look-alikes and other keys, rewritten, moved and expired at random:
    every read equals the last write (a plain dict), and the slab's lists stay consistent."""
    import random

    rng = random.Random(7)
    clock = FakeClock()
    store = MemoryStore(ttl_s=50, clock=clock)
    fps = [rng.getrandbits(64) for _ in range(300)] + [0, 1, 2**64 - 1]
    keys = [f"{p}:{hex(fp)}" for fp in fps for p in ("c", "k")]
    keys += ["c:0xABC", "c:0x0ab", "c:0x" + "f" * 17, "k:0x-1", "c:0x 1", "plain", "c:0xab"]
    expected: dict[str, tuple[Authorship, float]] = {}
    for step in range(6000):
        key = rng.choice(keys)
        if rng.random() < 0.6:
            value = Authorship(
                (f"m{rng.randrange(3)}",), rng.randrange(1, 9), float(step), rng.choice(["", "A", "B", "C"])
            )
            store.put_many([(key, value)])
            expected[key] = (value, clock.now)
        else:
            live = expected.get(key)
            want = live[0] if live and live[1] >= clock.now - 50 else None
            assert store.get_many([key]) == [want], (step, key)
        clock.now += rng.random()
    assert store.key_count == store.linked_key_count()
    probe = rng.sample(keys, 100)
    horizon = clock.now - 50
    assert store.get_many(probe) == [
        expected[k][0] if k in expected and expected[k][1] >= horizon else None for k in probe
    ]


def test_evicted_slots_are_reused_and_the_table_stays_consistent() -> None:
    """Past the cap whole conversations go; their slots are reused; survivors read back intact."""
    store = MemoryStore(max_conversations=20)
    for c in range(200):
        store.put_many([(f"c:{hex(c * 1000 + k + 1)}", _auth(f"conv{c}", k + 1)) for k in range(5)])
    assert len(store) == 20 and store.key_count == 100 == store.linked_key_count()
    assert len(store._kind) <= 105  # slots of evicted conversations were reused
    survivors = [f"c:{hex(c * 1000 + k + 1)}" for c in range(180, 200) for k in range(5)]
    assert store.get_many(survivors) == [_auth(f"conv{c}", k + 1) for c in range(180, 200) for k in range(5)]
    assert store.get_many(["c:0x1", "c:0x2"]) == [None, None]


def _merge(old: Authorship | None, new: Authorship) -> Authorship:
    from handoffmon.attribution.pending import merge_authorship

    return merge_authorship(old, new)


def test_merge_many_is_get_many_then_put_many() -> None:
    """merge_many writes merge(stored, new) per key, exactly as a read then a write would."""
    clock = FakeClock(100.0)
    one, two = MemoryStore(clock=clock), MemoryStore(clock=clock)
    first = [("c:0x1", _auth("c1", 1, "a")), ("k:0x2", _auth("c1", 1, "a")), ("odd", _auth(""))]
    for store in (one, two):
        store.put_many(first)
    later = [
        ("c:0x1", _auth("c1", 1, "b")),
        ("k:0x2", _auth("c2", 1, "a")),
        ("odd", _auth("")),
        ("c:0x9", _auth("c3")),
    ]
    one.merge_many(later, _merge)
    existing = two.get_many([k for k, _ in later])
    two.put_many([(k, _merge(old, new)) for (k, new), old in zip(later, existing, strict=True)])
    keys = ["c:0x1", "k:0x2", "odd", "c:0x9"]
    assert list(one._groups) == list(two._groups) and one.key_count == two.key_count == 4
    assert one.get_many(keys) == two.get_many(keys)
    assert one.get_many(["c:0x1"])[0].authors == ()  # type: ignore[union-attr]  # a collision marker


def test_merge_many_of_a_subclass_goes_through_its_own_get_and_put() -> None:
    """A subclass overriding get_many/put_many (a test double) is not bypassed."""
    calls: list[str] = []

    class Counting(MemoryStore):
        def get_many(self, keys):  # type: ignore[no-untyped-def]
            calls.append("get")
            return super().get_many(keys)

        def put_many(self, items):  # type: ignore[no-untyped-def]
            calls.append("put")
            super().put_many(items)

    store = Counting()
    assert not store.native_merge and MemoryStore().native_merge
    store.merge_many([("c:0x1", _auth("c1"))], _merge)
    assert calls == ["get", "put"] and store.get_many(["c:0x1"]) == [_auth("c1")]


def test_merge_many_on_a_closed_store_raises() -> None:
    """A closed store fails merge_many like get_many (the guard counts it as a get)."""
    from handoffmon.errors import StoreError
    from handoffmon.stores.guard import GuardedStore

    store = MemoryStore()
    store.close()
    with pytest.raises(StoreError):
        store.merge_many([("c:0x1", _auth("c1"))], _merge)
    guarded = GuardedStore(MemoryStore())
    guarded.inner.close()
    with pytest.raises(StoreError):
        guarded.merge_many([("c:0x1", _auth("c1"))], _merge)
    stats = guarded.stats()
    assert stats["get_errors"] == 1 and stats["put_errors"] == 0


def test_merge_many_with_expired_and_repeated_keys_matches_get_then_put() -> None:
    """An expired key is dropped and rewritten, a key given twice ends as one slot; same as get+put."""
    clock = FakeClock(100.0)
    one, two = MemoryStore(clock=clock, ttl_s=10), MemoryStore(clock=clock, ttl_s=10)
    for store in (one, two):
        store.put_many([("c:0x1", _auth("c1")), ("c:0x2", _auth("c2"))])
    clock.advance(11)
    for store in (one, two):
        store.put_many([("c:0x2", _auth("c2"))])  # keeps c2 alive; c:0x1 is now expired
    later = [("c:0x1", _auth("c1", 2)), ("c:0x1", _auth("c1", 2, "b")), ("c:0x3", _auth("c2"))]
    one.merge_many(later, _merge)
    existing = two.get_many([k for k, _ in later])
    two.put_many([(k, _merge(old, new)) for (k, new), old in zip(later, existing, strict=True)])
    assert one.key_count == two.key_count == 3 == one.linked_key_count()
    assert list(one._groups) == list(two._groups)
    keys = ["c:0x1", "c:0x2", "c:0x3"]
    assert one.get_many(keys) == two.get_many(keys)


def test_one_shared_conversation_keeps_at_most_its_key_cap() -> None:
    """A conversation id shared by all traffic (constant x-conversation-id) holds at most
    ``max_keys_per_conversation`` keys: its oldest go first, counted, the newest stay readable."""
    store = MemoryStore(max_conversations=10, max_keys_per_conversation=100)
    for i in range(1_000):
        store.put_many([(f"c:{hex(2 * i + 1)}", _auth("same", i)), (f"k:{hex(2 * i + 2)}", _auth("same", i))])
    assert store.key_count == 100 == store.linked_key_count()
    assert store.evicted_keys == 1_900 and store.evicted == 0
    assert store.get_many([f"c:{hex(2 * 999 + 1)}", f"k:{hex(2 * 950 + 2)}"]) == [
        _auth("same", 999),
        _auth("same", 950),
    ]
    assert store.get_many([f"c:{hex(2 * 949 + 1)}", "c:0x1"]) == [None, None]


def test_key_cap_leaves_other_conversations_and_state_alone() -> None:
    """The cap drops keys of the crowded conversation only; its state and others' keys stay,
    and the group's list stays consistent when its oldest keys are re-written or moved away."""
    store = MemoryStore(max_keys_per_conversation=3)
    store.put_state("big", {"n": 1})
    store.put_many([("other", _auth("small"))])
    store.put_many([(f"b{i}", _auth("big", i)) for i in range(3)])
    store.put_many([("b0", _auth("elsewhere"))])  # the oldest key moves to another group
    store.put_many([(f"b{i}", _auth("big", i)) for i in range(3, 6)])
    assert store.get_many(["b0", "b1", "b2", "b3", "b4", "b5", "other"]) == [
        _auth("elsewhere"),
        None,
        None,
        _auth("big", 3),
        _auth("big", 4),
        _auth("big", 5),
        _auth("small"),
    ]
    assert store.get_state("big") == {"n": 1}
    assert store.evicted_keys == 2 and store.key_count == store.linked_key_count() == 5


def test_key_cap_must_be_positive() -> None:
    """A cap of zero keys is refused at construction."""
    with pytest.raises(ValueError, match="max_keys_per_conversation"):
        MemoryStore(max_keys_per_conversation=0)


def test_all_conversations_keys_together_stay_under_max_keys() -> None:
    """The caps were per conversation and on the conversation count only: 100 conversations of
    100 keys each under max_conversations=100 held 10,000 keys (at the defaults, up to 10^9).
    Past max_keys the least recently used conversations go, counted as evictions of
    conversations; the most recent stay readable."""
    store = MemoryStore(max_conversations=100, max_keys_per_conversation=100, max_keys=1_000)
    for c in range(100):
        store.put_many([(f"c{c}:{i}", Authorship(("m",), i + 1, 1.0, f"conv-{c}")) for i in range(100)])
        assert len(store) <= 1_000
    assert store.evictions() == {"conversations": 90, "keys": 0}
    assert store.get_many(["c99:0", "c90:99", "c89:0"]) == [
        Authorship(("m",), 1, 1.0, "conv-99"),
        Authorship(("m",), 100, 1.0, "conv-90"),
        None,
    ]
    with pytest.raises(ValueError, match="max_keys"):
        MemoryStore(max_keys_per_conversation=100, max_keys=99)


def test_all_conversations_states_together_stay_under_max_state_bytes() -> None:
    """States had no bound of their own: only ``max_conversations`` (100,000) times a state's
    size, and a conversation that declares 32 long-named rules and alternates models keeps
    ~40 KB of cells (measured: 40,940 B marshalled), so hostile traffic could hold ~4 GB where
    ``max_keys`` promises ~0.5 GB for the keys. Past ``max_state_bytes`` (as stored) the least
    recently used conversations go, counted as evictions of conversations; the latest state is
    kept, even alone past the cap; replacing or expiring a state gives its bytes back."""
    clock = FakeClock()
    store = MemoryStore(max_conversations=1_000, max_state_bytes=100_000, ttl_s=60, clock=clock)
    big = {"cells": ["x" * 10_000]}
    for c in range(50):
        store.put_state(f"conv-{c}", big)
        assert store.state_bytes <= 100_000
    assert store.evictions()["conversations"] == 41 and len(store) == 9
    assert store.get_state("conv-49") == big and store.get_state("conv-40") is None
    store.put_state("conv-49", {"cells": []})  # replaced: its 10 KB are given back
    assert store.state_bytes < 9 * 10_100
    clock.now += 61
    store.put_state("fresh", {"cells": ["y" * 200_000]})  # past the cap alone: kept
    assert store.get_state("fresh") is not None and len(store) == 1
    assert 200_000 < store.state_bytes < 200_100
    with pytest.raises(ValueError, match="max_state_bytes"):
        MemoryStore(max_state_bytes=0)
