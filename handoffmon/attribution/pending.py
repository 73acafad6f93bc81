"""The in-process overlay of replies not yet persisted (merged as ``protocols.merge_authorship``)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from handoffmon.protocols import Authorship, merge_authorship

__all__ = ["PendingOverlay", "merge_authorship"]


class PendingOverlay:
    """Recorded-but-not-persisted authorships, so the next request in this process sees them.

    Bounded: past ``max_items`` keys the oldest entries are dropped (they are in the
    store by then, or the background queue is so far behind that the turn was dropped).
    Each ``add`` gets a sequence number; ``drop`` removes only entries that no later
    ``add`` replaced.

    Args:
        max_items: keys held at most.
    """

    __slots__ = ("_items", "_lock", "_seq", "max_items")

    def __init__(self, max_items: int = 100_000) -> None:
        self.max_items = max_items
        self._items: dict[str, tuple[Authorship, int]] = {}
        self._lock = threading.Lock()
        self._seq = 0

    def add(self, items: Sequence[tuple[str, Authorship]]) -> int:
        """Merge items in (see ``merge_authorship``); returns their sequence number."""
        with self._lock:
            self._seq += 1
            seq = self._seq
            for key, value in items:
                old = self._items.pop(key, None)
                self._items[key] = (merge_authorship(old[0] if old else None, value), seq)
            while len(self._items) > self.max_items:
                del self._items[next(iter(self._items))]
        return seq

    def get(self, key: str) -> Authorship | None:
        """The pending authorship of a key, if any."""
        hit = self._items.get(key)
        return hit[0] if hit is not None else None

    def get_many(self, keys: Sequence[str]) -> list[Authorship | None]:
        """``get`` of every key, in order."""
        get = self._items.get
        return [hit[0] if (hit := get(k)) is not None else None for k in keys]

    def drop(self, keys: Sequence[str], seq: int) -> None:
        """Forget keys persisted by the ``add`` numbered ``seq`` (unless re-added since)."""
        with self._lock:
            for key in keys:
                hit = self._items.get(key)
                if hit is not None and hit[1] == seq:
                    del self._items[key]

    def __len__(self) -> int:
        return len(self._items)
