"""In-memory attribution store: LRU by conversation (evicted together) with a TTL; the default."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence

from handoffmon.errors import StoreError
from handoffmon.protocols import Authorship


class _Group:
    """One conversation's keys and state (or a lone key without a conversation id)."""

    __slots__ = ("keys", "state", "written_at")

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.state: dict[str, object] | None = None
        self.written_at = 0.0


class MemoryStore:
    """Bounded, thread-safe ``AttributionStore`` held in process memory.

    Entries are grouped by ``Authorship.conversation_id`` (a key without one is its own
    group); the least recently used groups are evicted together once there are more than
    ``max_conversations``. Keys and state expire ``ttl_s`` after their last write.

    Args:
        max_conversations: LRU cap on groups (``store.max_conversations``).
        ttl_s: expiry after the last write (``store.ttl_s``).
        clock: wall clock (tests pass a fake).
    """

    def __init__(
        self,
        *,
        max_conversations: int = 100_000,
        ttl_s: float = 7 * 24 * 3600,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_conversations <= 0 or ttl_s <= 0:
            raise ValueError("max_conversations and ttl_s must be positive")
        self.max_conversations = max_conversations
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._keys: dict[str, tuple[Authorship, str, float]] = {}
        self._groups: OrderedDict[str, _Group] = OrderedDict()
        self._closed = False
        self.evicted = 0

    def _open(self) -> None:
        if self._closed:
            raise StoreError("memory store is closed")

    def get_many(self, keys: Sequence[str]) -> list[Authorship | None]:
        """Look up keys; a hit marks its conversation as recently used.

        Raises:
            StoreError: the store was closed.
        """
        self._open()
        now = self._clock()
        horizon = now - self.ttl_s
        out: list[Authorship | None] = []
        with self._lock:
            touched = ""
            for key in keys:
                entry = self._keys.get(key)
                if entry is None:
                    out.append(None)
                elif entry[2] < horizon:
                    self._drop_key(key, entry[1])
                    out.append(None)
                else:
                    if entry[1] != touched:
                        touched = entry[1]
                        self._groups.move_to_end(touched)
                    out.append(entry[0])
        return out

    def put_many(self, items: Sequence[tuple[str, Authorship]]) -> None:
        """Record keys (overwriting), then evict past the cap and sweep expired groups."""
        self._open()
        now = self._clock()
        with self._lock:
            for key, value in items:
                group_id = value.conversation_id or f"key:{key}"
                old = self._keys.get(key)
                if old is not None and old[1] != group_id:
                    self._drop_key(key, old[1])
                group = self._group(group_id, now)
                group.keys.add(key)
                self._keys[key] = (value, group_id, now)
            self._trim(now)

    def get_state(self, conversation_id: str) -> Mapping[str, object] | None:
        """A copy of the conversation's state, or ``None``."""
        self._open()
        with self._lock:
            group = self._groups.get(conversation_id)
            if group is None or group.state is None:
                return None
            if group.written_at < self._clock() - self.ttl_s:
                self._drop_group(conversation_id)
                return None
            self._groups.move_to_end(conversation_id)
            return dict(group.state)

    def put_state(self, conversation_id: str, state: Mapping[str, object]) -> None:
        """Replace the conversation's state."""
        self._open()
        now = self._clock()
        with self._lock:
            self._group(conversation_id, now).state = dict(state)
            self._trim(now)

    def close(self) -> None:
        """Forget everything; later calls raise ``StoreError``."""
        self._closed = True
        with self._lock:
            self._keys.clear()
            self._groups.clear()

    def __len__(self) -> int:
        """Number of tracked conversations (groups)."""
        return len(self._groups)

    @property
    def key_count(self) -> int:
        """Number of stored fingerprint keys."""
        return len(self._keys)

    # -- internals (lock held) ------------------------------------------------------------

    def _group(self, group_id: str, now: float) -> _Group:
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = _Group()
        else:
            self._groups.move_to_end(group_id)
        group.written_at = now
        return group

    def _drop_key(self, key: str, group_id: str) -> None:
        self._keys.pop(key, None)
        group = self._groups.get(group_id)
        if group is not None:
            group.keys.discard(key)
            if not group.keys and group.state is None:
                del self._groups[group_id]

    def _drop_group(self, group_id: str) -> None:
        group = self._groups.pop(group_id)
        for key in group.keys:
            self._keys.pop(key, None)

    def _trim(self, now: float) -> None:
        groups = self._groups
        while len(groups) > self.max_conversations:
            group_id = next(iter(groups))
            self._drop_group(group_id)
            self.evicted += 1
        horizon = now - self.ttl_s
        while groups:
            group_id, group = next(iter(groups.items()))
            if group.written_at >= horizon:
                break
            self._drop_group(group_id)
