"""Responses API calls made with ``background=True``, parked until their reply is retrieved.

Such a call answers at once with the response ``queued`` (or ``in_progress``) and no output,
which is no turn (``ingress.responses.unfinished``); the reply arrives later, when the
application polls ``responses.retrieve(id)``. The OpenAI client wrapper parks the call's
turn (its request as captured at the call, and when it began) under the response id, and the
first ``retrieve`` through the wrapper (or a ``with_options`` copy of it) that returns the
response finished takes it out and records it with that response: one turn per call, never
two (the entry is taken out under a lock; a later ``retrieve`` of the same id finds nothing).

Bounded: at most :data:`MAX_PARKED` calls, each for :data:`PARKED_TTL_S`, and the histories
of the parked calls together weigh at most :data:`MAX_PARKED_BYTES` (``held.held_bytes``);
past either bound the oldest call is forgotten, and its reply, retrieved later, is not a turn
(said once per process in the log). A reply read any other way — ``retrieve(id, stream=True)``,
a ``with_raw_response`` or ``with_streaming_response`` retrieve, another process — is not
recorded either (docs/operations/known-issues.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

from handoffmon.integrations.held import held_bytes

_log = logging.getLogger("handoffmon.integrations")

MAX_PARKED = 256
"""Background calls waiting for their reply at once, per wrapped client (and its copies)."""
PARKED_TTL_S = 3600.0
"""How long a background call waits for a ``retrieve`` that finds it finished."""
MAX_PARKED_BYTES = 64 * 1024 * 1024
"""Estimated bytes the parked calls' histories keep alive together (``held.held_bytes``)."""


class Parked(NamedTuple):
    """A background call's turn: its capture (or pending read), when it began, its weight."""

    ctx: Any
    t0: float
    expires: float
    weight: int


class Background:
    """The parked background calls of one wrapped client and its copies (thread-safe).

    Args:
        weigh: the bytes a call's ``ctx`` keeps alive (its history's ``held_bytes``).
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(self, weigh: Callable[[Any], int], clock: Callable[[], float] = time.monotonic) -> None:
        self._weigh = weigh
        self._clock = clock
        self._lock = threading.Lock()
        self._parked: OrderedDict[str, Parked] = OrderedDict()
        self._bytes = 0
        self._told = False

    def __len__(self) -> int:
        return len(self._parked)

    @property
    def held(self) -> int:
        """Estimated bytes of the parked histories."""
        return self._bytes

    def park(self, response_id: Any, ctx: Any, t0: float) -> bool:
        """Park a background call under its response id; False (nothing kept) when the id is no
        non-empty string or its history alone weighs more than :data:`MAX_PARKED_BYTES`."""
        if type(response_id) is not str or not response_id:
            return False
        weight = self._weigh(ctx)
        if weight > MAX_PARKED_BYTES:
            self._forgot()
            return False
        now = self._clock()
        with self._lock:
            old = self._parked.pop(response_id, None)
            if old is not None:
                self._bytes -= old.weight
            dropped = self._expire(now)
            while self._parked and (
                len(self._parked) >= MAX_PARKED or self._bytes + weight > MAX_PARKED_BYTES
            ):
                dropped += self._drop_oldest()
            self._parked[response_id] = Parked(ctx, t0, now + PARKED_TTL_S, weight)
            self._bytes += weight
        if dropped:  # said outside the lock (a log handler may take its time)
            self._forgot()
        return True

    def waiting(self, response_id: Any) -> bool:
        """Whether a call is parked under ``response_id`` (and not expired)."""
        if type(response_id) is not str:
            return False
        got = self._parked.get(response_id)
        return got is not None and got.expires > self._clock()

    def take(self, response_id: str) -> Parked | None:
        """Take the call parked under ``response_id`` out (``None``: none, or expired); only one
        caller ever gets it."""
        with self._lock:
            got = self._parked.pop(response_id, None)
            if got is not None:
                self._bytes -= got.weight
        if got is None or got.expires <= self._clock():
            return None
        return got

    def forget(self, response_id: Any) -> None:
        """Drop a parked call (``responses.cancel``, ``responses.delete``)."""
        if type(response_id) is str:
            self.take(response_id)

    def _expire(self, now: float) -> int:
        """Drop the expired calls (the oldest first; under the lock); returns how many."""
        n = 0
        while self._parked:
            first = next(iter(self._parked.values()))
            if first.expires > now:
                break
            n += self._drop_oldest()
        return n

    def _drop_oldest(self) -> int:
        _, gone = self._parked.popitem(last=False)
        self._bytes -= gone.weight
        return 1

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


def history_bytes(ctx: Any) -> int:
    """``held_bytes`` of a parked call's history: a capture's messages, or a pending call's
    ``input``."""
    request = getattr(ctx, "request", None)
    if request is not None:
        return held_bytes(request.messages)
    kwargs = getattr(ctx, "kwargs", None)
    return held_bytes(kwargs.get("input")) if isinstance(kwargs, dict) else 0
