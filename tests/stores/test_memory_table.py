"""Pins the memory store's table under random merges: a new key goes to the free position
``_find`` stopped at, through growth, rehashes, expiry, eviction and slot reuse."""

from __future__ import annotations

import random

from handoffmon.attribution.pending import merge_authorship
from handoffmon.protocols import Authorship
from handoffmon.stores.memory import MemoryStore
from handoffmon.testing import FakeClock


def _table_is_consistent(store: MemoryStore) -> None:
    """Every live slot is in the table once, reachable from its home by linear probing."""
    table, mask = store._table, store._mask
    placed = [s for s in table if s >= 0]
    assert sorted(placed) == [s for s in range(len(store._kind)) if store._kind[s] != 255]
    for i, slot in enumerate(table):
        if slot >= 0:
            j = store._hash[slot] & mask
            while j != i:
                assert table[j] >= 0  # no hole between home and position
                j = (j + 1) & mask


def test_random_merges_match_get_then_put_and_keep_the_table_consistent() -> None:
    """merge_many (insert at the probed position) equals get_many + put_many on random turns."""
    rng = random.Random(7)
    clock = FakeClock(1000.0)
    one = MemoryStore(max_conversations=30, ttl_s=50, clock=clock)
    two = MemoryStore(max_conversations=30, ttl_s=50, clock=clock)
    pool = [f"{p}:{hex(rng.getrandbits(rng.choice((8, 64))))}" for p in ("c", "k") for _ in range(300)]
    pool += ["odd-1", "odd-2", "c:0x0001"]  # non-canonical keys go through the dict index
    for turn in range(1500):
        conv = f"conv{rng.randrange(60)}" if rng.random() < 0.9 else ""
        author = rng.choice(("a", "b"))
        items = [
            (rng.choice(pool), Authorship((author,), rng.randrange(1, 4), float(turn), conv))
            for _ in range(rng.choice((1, 2, 2, 3)))
        ]
        one.merge_many(items, merge_authorship)
        existing = two.get_many([k for k, _ in items])
        two.put_many([(k, merge_authorship(old, new)) for (k, new), old in zip(items, existing, strict=True)])
        clock.advance(rng.random())
        if turn % 100 == 0:
            _table_is_consistent(one)
            assert one.key_count == two.key_count == one.linked_key_count()
            assert list(one._groups) == list(two._groups)
    _table_is_consistent(one)
    assert one.get_many(pool) == two.get_many(pool)
    assert list(one._groups) == list(two._groups)
