"""In-memory attribution store: LRU by conversation (evicted together) with a TTL; the default.

Compact layout (issue 21: ≤ 200 B per tracked turn). A tracked turn writes two keys (chain
and content fingerprint), so there are no per-key Python objects:

- keys the attributor writes (``"c:" + hex(h)``, ``"k:" + hex(h)``, ``"r:" + hex(h)``) are
  held as their 64-bit fingerprint plus a kind byte in packed ``array`` columns (a slab of
  slots);
- an open-addressing hash table (an ``array`` of slot numbers, linear probing, load ≤ ½,
  backward-shift deletion) finds a key's slot;
- author tuples are interned (a handful of models), the conversation id lives once in the
  key's group; slots of one group form a doubly linked list (newest at its head, oldest at
  its tail), so a group is evicted by walking it and its oldest key is dropped in O(1);
- conversation state is kept ``marshal``-ed (a deep copy in one bytes object).

Keys of any other shape (tests, foreign writers) go through an exact ``dict`` index, with
the same slot columns behind it.
"""

from __future__ import annotations

import marshal
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence

from handoffmon.errors import StoreError
from handoffmon.protocols import Authorship, Merge, merge_by_read_write

_FREE = 255
"""Kind byte of a free slot."""
_ODD = 2
"""Kind of a key held in the exact ``dict`` index (not a canonical fingerprint key)."""
_NO_CID = 4
"""Kind flag: the authorship had no conversation id (the key is its own group)."""
_KINDS = {"c:0x": 0, "k:0x": 1, "r:0x": 3}
_PREFIXES = ("c:", "k:", "", "r:")
_MIN_TABLE = 64


def _fingerprint(key: str) -> tuple[int, int]:
    """(fingerprint, kind) of a canonical ``"c:0x…"``/``"k:0x…"``/``"r:0x…"`` key, or (0, ``_ODD``)."""
    kind = _KINDS.get(key[:4], _ODD)
    if kind != _ODD and len(key) <= 20:
        try:
            fp = int(key[4:], 16)
        except ValueError:
            return 0, _ODD
        if fp >> 64 == 0 and hex(fp) == key[2:]:  # exactly what chain_key/content_key write
            return fp, kind
    return 0, _ODD


class MemoryStore:
    """Bounded, thread-safe ``AttributionStore`` held in process memory.

    Entries are grouped by ``Authorship.conversation_id`` (a key without one is its own
    group); the least recently used groups are evicted together once there are more than
    ``max_conversations``. A group holding more than ``max_keys_per_conversation`` keys drops
    its oldest (first recorded) keys, so one conversation id shared by all traffic cannot grow
    without bound; those drops are counted in :attr:`evicted_keys`. Past ``max_keys`` keys in
    all, the least recently used groups are evicted too (counted in :attr:`evicted`), so the
    store's size has a bound of its own, not only ``max_conversations`` ×
    ``max_keys_per_conversation`` (10^9 keys, ~100 GB, at the defaults). So do the states:
    past ``max_state_bytes`` of them (as stored) in all, the least recently used groups are
    evicted (counted in :attr:`evicted`; the latest is kept, even alone past the cap). Keys and
    state expire ``ttl_s`` after their last write.

    Args:
        max_conversations: LRU cap on groups (``store.max_conversations``).
        max_keys_per_conversation: cap on one group's keys (``store.max_keys_per_conversation``).
        max_keys: cap on all groups' keys (``store.max_keys``), at least
            ``max_keys_per_conversation``.
        ttl_s: expiry after the last write (``store.ttl_s``).
        clock: wall clock (tests pass a fake).
        max_state_bytes: cap on all groups' states together, as stored
            (``store.max_state_bytes``).
    """

    cache_size = 1024
    """Values kept built for reads (cleared when full): the keys of the conversations in
    flight, which every turn reads again. A fixed cost (~250 KB), not one per turn."""

    def __init__(
        self,
        *,
        max_conversations: int = 100_000,
        max_keys_per_conversation: int = 10_000,
        max_keys: int = 5_000_000,
        ttl_s: float = 7 * 24 * 3600,
        clock: Callable[[], float] = time.time,
        max_state_bytes: int = 256 * 1024 * 1024,
    ) -> None:
        if max_conversations <= 0 or max_keys_per_conversation <= 0 or ttl_s <= 0 or max_state_bytes <= 0:
            raise ValueError(
                "max_conversations, max_keys_per_conversation, max_state_bytes and ttl_s must be positive"
            )
        if max_keys < max_keys_per_conversation:
            raise ValueError("max_keys must be at least max_keys_per_conversation")
        self.max_conversations = max_conversations
        self.max_keys_per_conversation = max_keys_per_conversation
        self.max_keys = max_keys
        self.max_state_bytes = max_state_bytes
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._closed = False
        self.evicted = 0
        """Conversations evicted by the ``max_conversations``, ``max_keys`` or ``max_state_bytes`` cap."""
        self.evicted_keys = 0
        """Keys dropped by the ``max_keys_per_conversation`` cap (oldest of their conversation)."""
        self._reset()

    def evictions(self) -> dict[str, int]:
        """What the caps dropped so far: ``conversations`` (``max_conversations``, least recently
        used first) and ``keys`` (``max_keys_per_conversation``, oldest of their conversation).
        Exported as ``handoffmon_store_evictions_total{what}``; expiry by ``ttl_s`` is not an
        eviction."""
        return {"conversations": self.evicted, "keys": self.evicted_keys}

    def _reset(self) -> None:
        # slot columns
        self._fp = array("Q")
        self._kind = array("B")
        self._hash = array("q")  # hash(key): the table's probe sequence and a cheap pre-check
        self._author = array("I")
        self._depth = array("q")
        self._created = array("d")
        self._written = array("d")
        self._group_of = array("I")
        self._prev = array("i")
        self._next = array("i")  # also the free list
        self._free = -1
        self._live = 0
        # hash table by hash(key): slot numbers, -1 = empty
        self._table = array("i", [-1]) * _MIN_TABLE
        self._mask = _MIN_TABLE - 1
        # other keys' strings (their slots' fingerprint is unused)
        self._odd_key: dict[int, str] = {}
        # interned author tuples
        self._author_ids: dict[tuple[str, ...], int] = {}
        self._authors: list[tuple[str, ...]] = []
        # groups: name → id in LRU order; per-id columns
        self._groups: OrderedDict[str, int] = OrderedDict()
        self._g_name: list[str] = []
        self._g_state: list[object] = []
        self._state_bytes = 0  # of every group's state as stored (``_stored_size``)
        self._g_head = array("i")
        self._g_tail = array("i")
        self._g_count = array("I")
        self._g_written = array("d")
        self._g_free: list[int] = []
        # slot → its value as last written or read (bounded; rebuilding one costs ~1 µs)
        self._cache: dict[int, Authorship] = {}

    def _open(self) -> None:
        if self._closed:
            raise StoreError("memory store is closed")

    def get_many(self, keys: Sequence[str]) -> list[Authorship | None]:
        """Look up keys; a hit marks its conversation as recently used.

        Raises:
            StoreError: the store was closed.
        """
        self._open()
        horizon = self._clock() - self.ttl_s
        out: list[Authorship | None] = []
        append = out.append
        with self._lock:
            # the hot loop (the attributor asks for every assistant message of a history):
            # _find inlined. str hashes are cached on the key objects
            table, mask, hashes, fps, kinds = self._table, self._mask, self._hash, self._fp, self._kind
            written, group_of, cache, odd = self._written, self._group_of, self._cache, self._odd_key
            touched = -1
            for key in keys:
                h = hash(key)
                i = h & mask
                while True:
                    slot = table[i]
                    if slot < 0:
                        break
                    if hashes[slot] == h:
                        kind = kinds[slot] & 3
                        if key == (odd[slot] if kind == _ODD else _PREFIXES[kind] + hex(fps[slot])):
                            break
                    i = (i + 1) & mask
                if slot < 0:
                    append(None)
                elif written[slot] < horizon:
                    self._drop_key(slot)
                    append(None)
                else:
                    gid = group_of[slot]
                    if gid != touched:
                        touched = gid
                        self._groups.move_to_end(self._g_name[gid])
                    value = cache.get(slot)
                    append(value if value is not None else self._authorship(slot))
        return out

    def _authorship(self, slot: int) -> Authorship:
        """The slot's value, rebuilt from its columns and remembered in the bounded read cache."""
        value = Authorship(
            self._authors[self._author[slot]],
            self._depth[slot],
            self._created[slot],
            "" if self._kind[slot] & _NO_CID else self._g_name[self._group_of[slot]],
        )
        self._remember(slot, value)
        return value

    def _remember(self, slot: int, value: Authorship) -> None:
        cache = self._cache
        if len(cache) >= self.cache_size:
            cache.clear()
        cache[slot] = value

    def put_many(self, items: Sequence[tuple[str, Authorship]]) -> None:
        """Record keys (overwriting), then evict past the cap and sweep expired groups."""
        self._open()
        now = self._clock()
        with self._lock:
            self._put(items, now)

    @property
    def native_merge(self) -> bool:
        """``merge_many`` is one locked pass (not a subclass's own ``get_many``/``put_many``)."""
        cls = type(self)
        return cls.get_many is MemoryStore.get_many and cls.put_many is MemoryStore.put_many

    def merge_many(self, items: Sequence[tuple[str, Authorship]], merge: Merge) -> None:
        """``put_many`` of ``merge(get_many value, new value)`` per key, in one locked pass
        (the attributor's persist: one lock and no second probe of the table per call).

        Raises:
            StoreError: the store was closed.
        """
        if not self.native_merge:  # a subclass reads and writes its own way
            merge_by_read_write(self, items, merge)
            return
        self._open()
        horizon = self._clock() - self.ttl_s
        now = self._clock()
        with self._lock:
            slots = [self._read(key, horizon) for key, _ in items]
            merged = [(key, merge(self._value(s), new)) for (key, new), s in zip(items, slots, strict=True)]
            self._put(merged, now, slots)

    def _read(self, key: str, horizon: float) -> int:
        """A key's live slot as ``get_many`` reads it (-1: absent, or expired and dropped);
        a hit marks its group used."""
        slot = self._find(key)
        if slot < 0:
            return -1
        if self._written[slot] < horizon:
            self._drop_key(slot)
            return -1
        self._groups.move_to_end(self._g_name[self._group_of[slot]])
        return slot

    def _value(self, slot: int) -> Authorship | None:
        """The value of a slot ``_read`` returned (``None`` for -1)."""
        if slot < 0:
            return None
        value = self._cache.get(slot)
        return value if value is not None else self._authorship(slot)

    def _put(self, items: Sequence[tuple[str, Authorship]], now: float, found: Sequence[int] = ()) -> None:
        """``put_many``'s writes (lock held). ``found``: the keys' live slots as ``_read`` just
        returned them (a slot stays live until the trim at the end; -1 is looked up again,
        since an earlier item may have created it)."""
        last_name, last_gid = "", -1  # a reply's keys share one conversation: one group lookup
        kinds, g_name, group_of = self._kind, self._g_name, self._group_of
        grown: list[int] = []  # groups that gained keys: capped after the loop (``found`` stays valid)
        for i, (key, value) in enumerate(items):
            cid = value.conversation_id
            name = cid or f"key:{key}"
            slot = found[i] if found else -1
            if slot < 0:
                slot = self._find(key)
            linked = slot >= 0
            if linked and g_name[group_of[slot]] != name:
                self._unlink(slot)
                linked = False
            if name == last_name and g_name[last_gid] == name:
                gid = last_gid
            else:
                gid = last_gid = self._group(name, now)
                last_name = name
            if not linked:
                if slot < 0:  # -1 - the free table position _find stopped at (nothing moved since)
                    slot = self._new_slot(key, -1 - slot)
                self._link(slot, gid)
                if self._g_count[gid] > self.max_keys_per_conversation:
                    grown.append(gid)
            kind = kinds[slot] & 3
            kinds[slot] = kind if cid else kind | _NO_CID
            self._author[slot] = self._author_id(value.authors)
            self._depth[slot] = value.depth
            self._created[slot] = value.created_at
            self._written[slot] = now
            self._remember(slot, value)
        for gid in grown:
            self._cap_group(gid)
        self._trim(now)

    def _cap_group(self, gid: int) -> None:
        """Drop a group's oldest keys (its list's tail) past ``max_keys_per_conversation``:
        O(1) per key dropped, and a put drops at most as many keys as it added."""
        count, tail = self._g_count, self._g_tail
        while count[gid] > self.max_keys_per_conversation:
            self._drop_key(tail[gid])
            self.evicted_keys += 1

    def get_state(self, conversation_id: str) -> Mapping[str, object] | None:
        """A copy of the conversation's state, or ``None``."""
        return self.state_mapping(self.get_state_stored(conversation_id))

    def get_state_stored(self, conversation_id: str) -> object | None:
        """The conversation's state as held (``state_mapping`` reads it), or ``None``; marks
        the conversation recently used, like :meth:`get_state`.

        The object is the one :meth:`put_state_stored` returned for the last write, so a
        caller that kept what it wrote can tell by identity that nothing else replaced it
        (the check stage's state cache). Never change it.
        """
        self._open()
        with self._lock:
            gid = self._groups.get(conversation_id)
            if gid is None:
                return None
            state = self._g_state[gid]
            if state is None:
                return None
            if self._g_written[gid] < self._clock() - self.ttl_s:
                self._drop_group(conversation_id)
                return None
            self._groups.move_to_end(conversation_id)
        return state

    @staticmethod
    def state_mapping(stored: object | None) -> Mapping[str, object] | None:
        """A fresh copy of a state as :meth:`get_state_stored` returned it."""
        if stored is None:
            return None
        if isinstance(stored, bytes):
            loaded: dict[str, object] = marshal.loads(stored)
            return loaded
        assert isinstance(stored, dict)
        return dict(stored)

    def put_state(self, conversation_id: str, state: Mapping[str, object]) -> None:
        """Replace the conversation's state."""
        self.put_state_stored(conversation_id, state)

    def put_state_stored(self, conversation_id: str, state: Mapping[str, object]) -> object:
        """:meth:`put_state`, returning the object now held (see :meth:`get_state_stored`)."""
        self._open()
        now = self._clock()
        copy: object
        try:
            copy = marshal.dumps(dict(state))  # a deep copy in one object
        except ValueError:  # not plain data (a test's object, a dict subclass): keep a copy
            copy = dict(state)
        with self._lock:
            gid = self._group(conversation_id, now)
            self._state_bytes += _stored_size(copy) - _stored_size(self._g_state[gid])
            self._g_state[gid] = copy
            self._trim(now)
        return copy

    @property
    def state_bytes(self) -> int:
        """Bytes of all conversations' states as stored (what ``max_state_bytes`` caps)."""
        return self._state_bytes

    def close(self) -> None:
        """Forget everything; later calls raise ``StoreError``."""
        self._closed = True
        with self._lock:
            self._reset()

    def __len__(self) -> int:
        """Number of tracked conversations (groups)."""
        return len(self._groups)

    @property
    def key_count(self) -> int:
        """Number of stored fingerprint keys."""
        return self._live

    def linked_key_count(self) -> int:
        """Keys reachable from the groups' lists (equals ``key_count``; a consistency check)."""
        with self._lock:
            total = 0
            for gid in self._groups.values():
                slot = self._g_head[gid]
                while slot >= 0:
                    total += 1
                    slot = self._next[slot]
            return total

    # -- internals (lock held) ------------------------------------------------------------

    def _find(self, key: str) -> int:
        """Slot of a key, or (absent) ``-1 - i``: the free table position ``i`` where
        ``_new_slot`` can put it while the table is unchanged."""
        h = hash(key)
        table, mask, hashes = self._table, self._mask, self._hash
        i = h & mask
        while True:
            slot = table[i]
            if slot < 0:
                return -1 - i
            if hashes[slot] == h and self._matches(slot, key):
                return slot
            i = (i + 1) & mask

    def _matches(self, slot: int, key: str) -> bool:
        """The slot holds exactly ``key`` (its hash matched)."""
        kind = self._kind[slot] & 3
        if kind == _ODD:
            return self._odd_key[slot] == key
        return key == _PREFIXES[kind] + hex(self._fp[slot])

    def _new_slot(self, key: str, at: int) -> int:
        """A slot for an absent key, indexed at table position ``at`` (from ``_find``)."""
        fp, kind = _fingerprint(key)
        h = hash(key)
        slot = self._free
        if slot >= 0:
            self._free = self._next[slot]
            self._fp[slot] = fp
            self._kind[slot] = kind
            self._hash[slot] = h
        else:
            slot = len(self._kind)
            self._fp.append(fp)
            self._kind.append(kind)
            self._hash.append(h)
            self._author.append(0)
            self._depth.append(0)
            self._created.append(0.0)
            self._written.append(0.0)
            self._group_of.append(0)
            self._prev.append(-1)
            self._next.append(-1)
        if kind == _ODD:
            self._odd_key[slot] = key
        self._live += 1
        if 2 * self._live > len(self._table):
            self._rehash(2 * len(self._table))
        else:
            self._table[at] = slot
        return slot

    def _rehash(self, size: int) -> None:
        """Rebuild the table at ``size`` in numpy rounds (a Python loop held the lock ~1 µs
        per key: seconds at millions of keys). Each round places, per free target position,
        one of the keys aiming at it; the others step on. A key only ever steps over occupied
        positions, so every key stays reachable from its home by linear probing."""
        import numpy as np

        mask = size - 1
        live = np.flatnonzero(np.frombuffer(self._kind, dtype=np.uint8) != _FREE)
        pos = np.frombuffer(self._hash, dtype=np.int64)[live] & mask  # = hash & mask for negatives too
        table = np.full(size, -1, dtype=np.int32)
        pending = np.arange(len(live))
        while len(pending):
            targets = pos[pending]
            aiming = pending[table[targets] < 0]
            _, first = np.unique(pos[aiming], return_index=True)
            winners = aiming[first]
            table[pos[winners]] = live[winners]
            placed = np.zeros(len(live), dtype=bool)
            placed[winners] = True
            pending = pending[~placed[pending]]
            pos[pending] = (pos[pending] + 1) & mask
        self._table = array("i")
        self._table.frombytes(table.tobytes())
        self._mask = mask

    def _unindex(self, slot: int) -> None:
        """Remove a canonical key's slot from the table (backward-shift deletion)."""
        table, mask, hashes = self._table, self._mask, self._hash
        i = hashes[slot] & mask
        while table[i] != slot:
            i = (i + 1) & mask
        j = i
        while True:
            j = (j + 1) & mask
            other = table[j]
            if other < 0:
                break
            home = hashes[other] & mask
            # ``other`` may move back to the hole at i unless its home lies cyclically in (i, j]
            if (i < j and (home <= i or home > j)) or (i > j and home <= i and home > j):
                table[i] = other
                i = j
        table[i] = -1

    def _free_slot(self, slot: int) -> None:
        self._cache.pop(slot, None)
        self._unindex(slot)
        if self._kind[slot] & 3 == _ODD:
            del self._odd_key[slot]
        self._kind[slot] = _FREE
        self._next[slot] = self._free
        self._free = slot
        self._live -= 1

    def _author_id(self, authors: tuple[str, ...]) -> int:
        aid = self._author_ids.get(authors)
        if aid is None:
            if len(self._authors) >= max(1024, 2 * self._live):
                self._compact_authors()
            aid = self._author_ids[authors] = len(self._authors)
            self._authors.append(authors)
        return aid

    def _compact_authors(self) -> None:
        """Forget author tuples no live key uses (bounds the interning table)."""
        kinds, author = self._kind, self._author
        old = self._authors
        self._authors, self._author_ids = [], {}
        for slot in range(len(kinds)):
            if kinds[slot] != _FREE:
                names = old[author[slot]]
                aid = self._author_ids.get(names)
                if aid is None:
                    aid = self._author_ids[names] = len(self._authors)
                    self._authors.append(names)
                author[slot] = aid

    def _group(self, name: str, now: float) -> int:
        gid = self._groups.get(name)
        if gid is None:
            if self._g_free:
                gid = self._g_free.pop()
                self._g_name[gid] = name
            else:
                gid = len(self._g_name)
                self._g_name.append(name)
                self._g_state.append(None)
                self._g_head.append(-1)
                self._g_tail.append(-1)
                self._g_count.append(0)
                self._g_written.append(0.0)
            self._groups[name] = gid
        else:
            self._groups.move_to_end(name)
        self._g_written[gid] = now
        return gid

    def _link(self, slot: int, gid: int) -> None:
        head = self._g_head[gid]
        self._group_of[slot] = gid
        self._prev[slot] = -1
        self._next[slot] = head
        if head >= 0:
            self._prev[head] = slot
        else:
            self._g_tail[gid] = slot
        self._g_head[gid] = slot
        self._g_count[gid] += 1

    def _unlink(self, slot: int) -> None:
        """Take a slot out of its group's list; drop the group if nothing is left in it."""
        gid = self._group_of[slot]
        prev, nxt = self._prev[slot], self._next[slot]
        if prev >= 0:
            self._next[prev] = nxt
        else:
            self._g_head[gid] = nxt
        if nxt >= 0:
            self._prev[nxt] = prev
        else:
            self._g_tail[gid] = prev
        self._g_count[gid] -= 1
        if not self._g_count[gid] and self._g_state[gid] is None:
            self._release_group(self._g_name[gid], gid)

    def _drop_key(self, slot: int) -> None:
        self._unlink(slot)
        self._free_slot(slot)

    def _drop_group(self, name: str) -> None:
        gid = self._groups[name]
        slot = self._g_head[gid]
        nxt = self._next
        while slot >= 0:
            following = nxt[slot]
            self._free_slot(slot)
            slot = following
        self._release_group(name, gid)

    def _release_group(self, name: str, gid: int) -> None:
        del self._groups[name]
        self._g_name[gid] = ""
        self._state_bytes -= _stored_size(self._g_state[gid])
        self._g_state[gid] = None
        self._g_head[gid] = -1
        self._g_tail[gid] = -1
        self._g_count[gid] = 0
        self._g_free.append(gid)

    def _trim(self, now: float) -> None:
        groups = self._groups
        # the key cap never drops the last group: one holds at most max_keys_per_conversation
        while len(groups) > self.max_conversations or (
            len(groups) > 1 and (self._live > self.max_keys or self._state_bytes > self.max_state_bytes)
        ):
            self._drop_group(next(iter(groups)))
            self.evicted += 1
        horizon = now - self.ttl_s
        written = self._g_written
        while groups:
            name, gid = next(iter(groups.items()))
            if written[gid] >= horizon:
                break
            self._drop_group(name)


def _stored_size(state: object) -> int:
    """Bytes a stored state takes: its ``marshal`` blob's length (a state that is not plain data,
    kept as a dict copy, counts 0: tests only)."""
    return len(state) if isinstance(state, bytes) else 0
