"""``GuardedStore``: the one fail-open wrapper every attribution store runs behind, in every mode.

Backends raise ``StoreError`` (``StoreTimeout``, ``CorruptValue``, ...). The guard counts
every failure by operation and kind — exported as ``handoffmon_store_failures_total{op,
kind}`` by the runtime whichever entry point built it (wrap, LiteLLM callback, serve) —
and every call it makes (``handoffmon_store_operations_total{op}``, the failures' denominator),
reports it to the pipeline's error sink (``monitor_errors{stage="store"}``), and stops
calling a backend that failed ``trip_after`` times in a row for ``retry_after_s``
(``kind="skipped"``), so a dead or hung Redis costs at most a few timeouts per pause.

Failures are re-raised as ``StoreError`` so each caller takes its own fail-open path
(an unknown attribution, a fresh conversation state, a reply kept in the in-process
overlay until the store is back); a ``CorruptValue`` is not raised: the readable part of
the answer is returned, the unreadable values as ``None``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from handoffmon.errors import CorruptValue, StoreError, StoreSkipped
from handoffmon.protocols import AttributionStore, Authorship, Merge, merge_by_read_write

OPS = ("get", "put", "get_state", "put_state")
"""Operations counted (``stats()`` keys are ``<op>_<kind>``)."""

KINDS = ("errors", "timeouts", "corrupt", "skipped")
"""Failure kinds: backend error, no answer in time, undecodable value, not tried (backing off)."""

STATE_READS = frozenset({"merge_many_get_state", "merge_get_states"})
"""Backend methods counted as ``get`` that also read conversation states: one ``get_state``
operation each too, the op their unreadable states are counted under (``get_state_corrupt``)."""

CONFLICTS = "conflicts"
"""``put_state_conflicts``: state writes refused because another writer (a replica, a process
sharing the SQLite file) had written the conversation since it was read; folded again."""


READS = frozenset({"get_many", "get_state", "get_state_stored"})
"""Backend methods that only read: their success says nothing of writes failing meanwhile."""


class _Breaker:
    """After ``trip_after`` consecutive failures, skip the backend for ``retry_after_s``.

    The first call after the pause probes the backend again; a success closes the breaker,
    except a read's while writes fail: a backend that answers reads but refuses writes (a
    SQLite file another process holds locked, a full disk, a Redis out of memory) still
    trips it, and stays unhealthy, where reads in between writes reset it before. A probe
    that fails opens it again at once (not after ``trip_after`` more failures): a backend
    still down costs one wait per pause, not ``trip_after``.
    """

    def __init__(self, retry_after_s: float, trip_after: int, clock: Callable[[], float]) -> None:
        self._retry_after_s = retry_after_s
        self._trip_after = max(1, trip_after)
        self._clock = clock
        self._open_until = 0.0
        self._failures = 0
        self._writes_failing = False
        self._tripped = False  # opened since the last success: the next failure is a failed probe
        self.down = False
        """The last call tried failed (cleared by the next success; a read's clears it only
        when no write has failed since the last write that succeeded)."""

    def allows(self) -> bool:
        return self._clock() >= self._open_until

    def trip(self, write: bool = False) -> None:
        self.down = True
        self._writes_failing = self._writes_failing or write
        self._failures += 1
        if self._failures >= self._trip_after or self._tripped:
            self._failures = 0
            self._tripped = True
            self._open_until = self._clock() + self._retry_after_s

    def reset(self, write: bool = True) -> None:
        if not write and self._writes_failing:
            return  # reads answer, writes fail: not a recovery
        if self._failures or self._open_until or self.down or self._writes_failing:
            self._failures = 0
            self._open_until = 0.0
            self.down = False
            self._writes_failing = False
            self._tripped = False


class GuardedStore:
    """An ``AttributionStore`` that counts, reports and backs off from its backend's failures.

    Args:
        inner: the backend (memory, SQLite, Redis or any ``AttributionStore``).
        on_failure: called with the op and kind of every failure (not for skipped calls).
        retry_after_s: how long to skip the backend once the breaker trips.
        trip_after: consecutive failures that trip the breaker.
        clock: monotonic time source (tests pass a fake).
    """

    def __init__(
        self,
        inner: AttributionStore,
        *,
        on_failure: Callable[[str, str], None] | None = None,
        retry_after_s: float = 1.0,
        trip_after: int = 3,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self._on_failure = on_failure
        self._breaker = _Breaker(retry_after_s, trip_after, clock)
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {f"{op}_{kind}": 0 for op in OPS for kind in KINDS}
        self._counts[f"put_state_{CONFLICTS}"] = 0
        self._ops: dict[str, int] = dict.fromkeys(OPS, 0)

    def _call(self, op: str, method: str, *args: Any) -> Any:
        """The backend's ``method(*args)``, counted and backed off as ``op`` (the method is looked
        up inside the guard, so a backend without it fails like one that raised).

        Every call is one operation of ``op`` (``operations()``), skipped ones included, however
        many keys or turns it carries: the unit its failures are counted in, so a batch of 64
        turns in one Redis round trip is one operation and, failing, one failure."""
        with self._lock:
            self._ops[op] += 1
            if method in STATE_READS:
                self._ops["get_state"] += 1
        if not self._breaker.allows():
            self._count(op, StoreSkipped.kind)
            raise StoreSkipped(f"store {op} skipped: backing off after repeated failures")
        write = method not in READS
        try:
            result = getattr(self.inner, method)(*args)
        except CorruptValue as exc:  # the backend answered: not a reason to back off
            self._breaker.reset(write)
            self._failed(exc.op or op, exc.kind)
            return exc.partial  # type: ignore[return-value]
        except StoreError as exc:
            self._breaker.trip(write)
            self._failed(op, exc.kind)
            raise
        except Exception as exc:  # a backend that does not translate its errors
            self._breaker.trip(write)
            self._failed(op, StoreError.kind)
            raise StoreError(f"store {op} failed: {type(exc).__name__}: {exc}") from exc
        self._breaker.reset(write)
        return result

    def failed_at_start(self, op: str, exc: StoreError) -> None:
        """The backend could not be opened at start (a corrupt or read-only SQLite file): count
        it as a failed ``op`` (an operation that failed) and report the store failing open
        (``healthy`` False) until a call succeeds; calls go on trying it, backed off as after
        any failure."""
        with self._lock:
            self._ops[op] = self._ops.get(op, 0) + 1
        self._breaker.trip()
        self._failed(op, exc.kind)

    def count(self, op: str, kind: str, n: int = 1) -> None:
        """Count ``n`` failures of ``op`` found outside a store call (``stats()`` key
        ``<op>_<kind>``; not reported to ``on_failure``), e.g. unreadable aggregate rows."""
        self._count(op, kind, n)

    def _count(self, op: str, kind: str, n: int = 1) -> None:
        key = f"{op}_{kind}"
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + n

    def _failed(self, op: str, kind: str) -> None:
        self._count(op, kind)
        if self._on_failure is not None:
            with contextlib.suppress(Exception):  # error accounting must not turn into an error
                self._on_failure(op, kind)

    # -- AttributionStore ---------------------------------------------------------------

    def get_many(self, keys: Sequence[str]) -> list[Authorship | None]:
        """The backend's answer; ``StoreError`` when it failed (unreadable values → ``None``)."""
        if not keys:
            return []
        result = self._call("get", "get_many", keys)
        return result if result is not None else [None] * len(keys)

    def put_many(self, items: Sequence[tuple[str, Authorship]]) -> None:
        """Write through; ``StoreError`` when the backend failed."""
        if items:
            self._call("put", "put_many", items)

    def merge_many(self, items: Sequence[tuple[str, Authorship]], merge: Merge) -> None:
        """``put_many`` of ``merge(stored value, new value)`` per key: one backend call when the
        backend merges natively (``MemoryStore.native_merge``, counted as ``get``, the op that
        fails first), else ``get_many`` then ``put_many`` through this guard."""
        inner: Any = self.inner
        if items and getattr(inner, "native_merge", False):
            self._call("get", "merge_many", items, merge)
            return
        merge_by_read_write(self, items, merge)

    def merge_many_get_state(
        self, items: Sequence[tuple[str, Authorship]], merge: Merge, conversation_id: str
    ) -> Mapping[str, object] | None:
        """:meth:`merge_many`, then the conversation's state: one backend call where the backend
        does both (``RedisStore.merge_many_get_state``, counted as ``get``; an unreadable state
        as ``get_state``), else the two calls. ``StoreError`` when the backend failed: neither
        the merge nor the read can be assumed done."""
        inner: Any = self.inner
        if items and getattr(inner, "native_merge_state", False):
            state: Mapping[str, object] | None = self._call(
                "get", "merge_many_get_state", items, merge, conversation_id
            )
            return state
        self.merge_many(items, merge)
        return self.get_state(conversation_id)

    @property
    def native_batches(self) -> bool:
        """The backend merges and reads many conversations' replies and states in one call
        (:meth:`merge_get_states`, :meth:`put_states`: one Redis round trip each)."""
        return bool(getattr(self.inner, "native_batches", False))

    def merge_get_states(
        self, requests: Sequence[tuple[Sequence[tuple[str, Authorship]], str | None]], merge: Merge
    ) -> list[Mapping[str, object] | None]:
        """:meth:`merge_many_get_state` of many turns, in order, in one backend call
        (``RedisStore.merge_get_states``, counted as ``get``): per request, its reply's keys
        merged, then its conversation's state read (``None`` for a ``None`` id). Unreadable
        states read as ``None`` (counted). ``StoreError`` when the backend failed: no merge
        or read of the batch can be assumed done (also when the backend has no such call)."""
        if not requests:
            return []
        states: list[Mapping[str, object] | None] | None = self._call(
            "get", "merge_get_states", requests, merge
        )
        return states if states is not None else [None] * len(requests)

    def put_states(self, states: Sequence[tuple[str, Mapping[str, object]]]) -> None:
        """:meth:`put_state` of many conversations in one backend call (``put_state``)."""
        if not states:
            return
        self._call("put_state", "put_states", states)

    @property
    def native_cas(self) -> bool:
        """The backend writes states compare-and-set (:meth:`put_states_if`)."""
        return bool(getattr(self.inner, "native_cas", False))

    def put_states_if(
        self, states: Sequence[tuple[str, Mapping[str, object], int]]
    ) -> dict[str, Mapping[str, object] | None]:
        """The backend's ``put_states_if`` (counted as ``put_state``): each state written only
        while the stored one has the revision it was folded from; the conversations not
        written, with their stored state, are returned and counted as ``put_state_conflicts``
        (not failures: the caller folds again). ``StoreError`` when the backend failed."""
        if not states:
            return {}
        conflicts: dict[str, Mapping[str, object] | None] | None = self._call(
            "put_state", "put_states_if", states
        )
        if not conflicts:
            return {}
        self._count("put_state", CONFLICTS, len(conflicts))
        return conflicts

    def get_state(self, conversation_id: str) -> Mapping[str, object] | None:
        """The backend's answer; ``StoreError`` when it failed (unreadable state → ``None``)."""
        state: Mapping[str, object] | None = self._call("get_state", "get_state", conversation_id)
        return state

    def put_state(self, conversation_id: str, state: Mapping[str, object]) -> None:
        """Write through; ``StoreError`` when the backend failed."""
        self._call("put_state", "put_state", conversation_id, state)

    def get_state_stored(self, conversation_id: str) -> object | None:
        """``MemoryStore.get_state_stored`` through the guard (counted as ``get_state``)."""
        stored: object | None = self._call("get_state", "get_state_stored", conversation_id)
        return stored

    def put_state_stored(self, conversation_id: str, state: Mapping[str, object]) -> object:
        """``MemoryStore.put_state_stored`` through the guard (counted as ``put_state``)."""
        stored: object = self._call("put_state", "put_state_stored", conversation_id, state)
        return stored

    def close(self) -> None:
        """Close the backend."""
        self.inner.close()

    # -- health ---------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Failure counters ``<op>_<kind>`` (``kind`` in ``KINDS``)."""
        with self._lock:
            return dict(self._counts)

    def operations(self) -> dict[str, int]:
        """Backend calls made or skipped, by ``op`` (``OPS``): one per call whatever it carries
        (a Redis batch of many turns' merges and state reads is one ``get``, and one
        ``get_state``), the unit ``stats()`` counts failures in, so failures / operations is
        the share of calls that failed."""
        with self._lock:
            return dict(self._ops)

    def evictions(self) -> dict[str, int]:
        """The backend's own eviction counters (``MemoryStore.evictions``), ``{}`` for a backend
        that evicts nothing itself (Redis and SQLite expire by TTL)."""
        evictions = getattr(self.inner, "evictions", None)
        return evictions() if callable(evictions) else {}

    def probe(self) -> bool:
        """Whether the backend answers now (its ``ping``; a store without one is taken as
        answering); a success closes the breaker, so ``healthy`` is True again before traffic
        needs the store (readiness probes: ``/readyz``). Blocks up to the backend's timeout;
        never raises."""
        ping = getattr(self.inner, "ping", None)
        try:
            ok = bool(ping()) if callable(ping) else True
        except Exception:
            ok = False
        if ok:
            self._breaker.reset()
        return ok

    @property
    def available(self) -> bool:
        """False while the guard is skipping the backend after repeated failures."""
        return self._breaker.allows()

    @property
    def healthy(self) -> bool:
        """False from a failed backend call until one succeeds (between the breaker's probes
        too, when ``available`` is True again but the backend has not answered yet)."""
        return not self._breaker.down

    def __getattr__(self, name: str) -> Any:
        # backend extras (ping, purge, key_count, ...) stay reachable
        return getattr(self.inner, name)
