"""Per-target circuit breaker: shadow traffic stops by itself while a target answers 429/5xx
(or 401/403/404: misconfigured)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Breaker:
    """Open after ``failures`` consecutive failures of a target, for ``cooldown_s``; then one probe.

    While open, ``allow`` is False; after the cooldown one call is let through (half-open):
    its success closes the breaker, its failure opens it for another cooldown.
    """

    def __init__(self, failures: int, cooldown_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.failures, self.cooldown_s, self._clock = failures, cooldown_s, clock
        self._lock = threading.Lock()
        self._streak: dict[str, int] = {}
        self._open_until: dict[str, float] = {}
        self._probing: set[str] = set()

    def allow(self, target: str) -> bool:
        with self._lock:
            until = self._open_until.get(target)
            if until is None:
                return True
            if self._clock() < until or target in self._probing:
                return False
            self._probing.add(target)
            return True

    def is_open(self, target: str) -> bool:
        """Whether the target's shadow traffic is stopped now."""
        with self._lock:
            until = self._open_until.get(target)
            return until is not None and (self._clock() < until or target in self._probing)

    def release(self, target: str) -> None:
        """Give back a probe that ``allow`` granted but no call used."""
        with self._lock:
            self._probing.discard(target)

    def record(self, target: str, ok: bool) -> None:
        """Report a finished call: ``ok`` False for 429, 5xx, timeouts, connection errors and
        401/403/404 (``turns.failure_kind``)."""
        with self._lock:
            self._probing.discard(target)
            if ok:
                self._streak.pop(target, None)
                self._open_until.pop(target, None)
                return
            streak = self._streak.get(target, 0) + 1
            self._streak[target] = streak
            if streak >= self.failures or target in self._open_until:
                self._open_until[target] = self._clock() + self.cooldown_s
