"""Responses API calls made with ``background=True``, parked until their reply is retrieved.

Such a call answers at once with the response ``queued`` (or ``in_progress``) and no output,
which is no turn (``ingress.responses.unfinished``); the reply arrives later, when the
application polls ``GET /v1/responses/{id}`` (``responses.retrieve(id)``). The OpenAI client
wrapper (``integrations.openai_client``) and ``handoffmon serve`` (``proxy.background``) each
park the call's turn (its request as captured at the call, and when it began) under the
response id, and the first retrieve that returns the response finished takes it out and
records it with that response: one turn per call, never two (the entry is taken out under a
lock; a later retrieve of the same id finds nothing).

Bounded: at most :data:`MAX_PARKED` calls, each for :data:`PARKED_TTL_S`, and the parked
calls together weigh at most :data:`MAX_PARKED_BYTES` (the owner's ``weigh``: a history's
``held_bytes``, a request body's bytes); past either bound the oldest call is forgotten, and
its reply, retrieved later, is not a turn (said once per process in the log, and handed to
the owner's ``on_drop``, as is a call forgotten by :meth:`Background.forget`). A reply read any
other way — a streamed retrieve, another process or replica — is not recorded either
(docs/operations/known-issues.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

_log = logging.getLogger("handoffmon")

MAX_PARKED = 256
"""Background calls waiting for their reply at once, per owner (a wrapped client and its
copies, a ``serve`` process)."""
PARKED_TTL_S = 3600.0
"""How long a background call waits for a retrieve that finds it finished."""
MAX_PARKED_BYTES = 64 * 1024 * 1024
"""Estimated bytes the parked calls keep alive together (the owner's ``weigh``)."""


class Parked(NamedTuple):
    """A background call's turn: its capture (or pending read), when it began, its weight."""

    ctx: Any
    t0: float
    expires: float
    weight: int


class Background:
    """The parked background calls of one owner (thread-safe).

    Args:
        weigh: the bytes a call's ``ctx`` keeps alive.
        clock: monotonic seconds (tests pass their own).
        on_drop: called (outside the lock, on the thread that dropped it) with each call that
            leaves without being taken: pushed out past a bound, found expired, replaced by a
            call parked under the same id, or forgotten; it must not raise.
    """

    def __init__(
        self,
        weigh: Callable[[Any], int],
        clock: Callable[[], float] = time.monotonic,
        on_drop: Callable[[Parked], object] | None = None,
    ) -> None:
        self._weigh = weigh
        self._clock = clock
        self._on_drop = on_drop
        self._lock = threading.Lock()
        self._parked: OrderedDict[str, Parked] = OrderedDict()
        self._bytes = 0
        self._told = False

    def __len__(self) -> int:
        return len(self._parked)

    @property
    def held(self) -> int:
        """Estimated bytes of the parked calls."""
        return self._bytes

    def park(self, response_id: Any, ctx: Any, t0: float) -> bool:
        """Park a background call under its response id; False (nothing kept) when the id is no
        non-empty string or the call alone weighs more than :data:`MAX_PARKED_BYTES`."""
        if type(response_id) is not str or not response_id:
            return False
        weight = self._weigh(ctx)
        if weight > MAX_PARKED_BYTES:
            self._forgot()
            return False
        now = self._clock()
        dropped: list[Parked] = []
        with self._lock:
            old = self._parked.pop(response_id, None)
            if old is not None:
                self._bytes -= old.weight
                dropped.append(old)
            evicted = self._expire(now, dropped)
            while self._parked and (
                len(self._parked) >= MAX_PARKED or self._bytes + weight > MAX_PARKED_BYTES
            ):
                evicted += self._drop_oldest(dropped)
            self._parked[response_id] = Parked(ctx, t0, now + PARKED_TTL_S, weight)
            self._bytes += weight
        if evicted:  # said outside the lock (a log handler may take its time)
            self._forgot()
        self._dropped(dropped)
        return True

    def waiting(self, response_id: Any) -> bool:
        """Whether a call is parked under ``response_id`` (and not expired)."""
        if type(response_id) is not str:
            return False
        got = self._parked.get(response_id)
        return got is not None and got.expires > self._clock()

    def peek(self, response_id: str) -> Any:
        """The ``ctx`` of the call parked under ``response_id`` (left parked), else ``None``."""
        got = self._parked.get(response_id)
        return got.ctx if got is not None else None

    def take(self, response_id: str) -> Parked | None:
        """Take the call parked under ``response_id`` out (``None``: none, or expired); only one
        caller ever gets it."""
        with self._lock:
            got = self._parked.pop(response_id, None)
            if got is not None:
                self._bytes -= got.weight
        if got is not None and got.expires <= self._clock():
            self._dropped([got])
            return None
        return got

    def forget(self, response_id: Any) -> None:
        """Drop a parked call (``responses.cancel``, ``responses.delete``)."""
        if type(response_id) is str:
            got = self.take(response_id)
            if got is not None:
                self._dropped([got])

    def clear(self) -> None:
        """Drop every parked call (a ``serve`` shutting down: each one handed to ``on_drop``)."""
        with self._lock:
            dropped = list(self._parked.values())
            self._parked.clear()
            self._bytes = 0
        self._dropped(dropped)

    def _expire(self, now: float, dropped: list[Parked]) -> int:
        """Drop the expired calls (the oldest first; under the lock); returns how many."""
        n = 0
        while self._parked:
            first = next(iter(self._parked.values()))
            if first.expires > now:
                break
            n += self._drop_oldest(dropped)
        return n

    def _drop_oldest(self, dropped: list[Parked]) -> int:
        _, gone = self._parked.popitem(last=False)
        self._bytes -= gone.weight
        dropped.append(gone)
        return 1

    def _dropped(self, dropped: list[Parked]) -> None:
        if self._on_drop is not None:
            for gone in dropped:
                self._on_drop(gone)

    def _forgot(self) -> None:
        if not self._told:
            self._told = True
            _log.warning(
                "handoffmon: a background Responses call was forgotten before its reply was "
                "retrieved (at most %d wait, each for %.0f s, %d MiB of history together): "
                "its reply will not be recorded as a turn",
                MAX_PARKED,
                PARKED_TTL_S,
                MAX_PARKED_BYTES >> 20,
            )
