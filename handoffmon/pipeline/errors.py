"""``ErrorSink``: the one place the pipeline's own failures, drops and overheads are counted.

Every stage (attribution, checks, exports, the store guard, the refit schedule, the
adapters) reports here; it counts ``monitor_errors{stage}`` and queue drops in the
aggregates and pushes them to every exporter that observes monitor health.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence

from handoffmon.pipeline.aggregates import Aggregates
from handoffmon.protocols import MonitorObserver
from handoffmon.types import MONITOR_STAGES

_log = logging.getLogger("handoffmon.pipeline")

STAGES = MONITOR_STAGES
"""Stages ``monitor_errors`` is counted by (``types.MONITOR_STAGES``: exported at 0 from the start)."""


MAX_LOG_KINDS = 256
"""Error kinds the log limiter tracks; further kinds share one budget."""


class LogLimiter:
    """At most one log line per kind per ``interval_s``; counts the lines it held back.

    Lock-free (a dict read and write under the GIL): a race costs at most one extra line,
    and nothing here can block a thread that fails while holding a lock.

    Args:
        interval_s: seconds between two lines of one kind (0: every line).
        clock: monotonic seconds.
    """

    def __init__(self, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = interval_s
        self._clock = clock
        self._kinds: dict[object, tuple[float, int]] = {}
        self.suppressed = 0
        """Lines held back so far (all kinds)."""

    def allow(self, kind: object) -> int | None:
        """None: stay silent (counted). Else log now: the int is the lines of this kind held back."""
        if kind not in self._kinds and len(self._kinds) >= MAX_LOG_KINDS:
            kind = "<other>"
        now = self._clock()
        last, held = self._kinds.get(kind, (float("-inf"), 0))
        if now - last < self._interval:
            self._kinds[kind] = (last, held + 1)
            self.suppressed += 1
            return None
        self._kinds[kind] = (now, 0)
        return held


class ErrorSink:
    """Counts failures by stage, drops and stage overheads; never raises.

    Every failure is counted; its log line is rate limited per (stage, exception type) by
    a :class:`LogLimiter`, so a client or upstream that makes every request fail cannot
    flood the logs.

    Args:
        aggregates: where ``monitor_errors`` and drops are counted.
        log_interval_s: ``pipeline.error_log_interval_s``.
    """

    def __init__(self, aggregates: Aggregates, *, log_interval_s: float = 60.0) -> None:
        self._aggregates = aggregates
        self._observers: tuple[MonitorObserver, ...] = ()
        self._many: tuple[Callable[[Sequence[tuple[str, float]]], None], ...] = ()
        self._early: Counter[str] = Counter()
        """Failures counted before the first observer was attached (a store that could not be
        opened while the monitor was being built): replayed to every observer attached later."""
        self._early_drops = 0
        self.logs = LogLimiter(log_interval_s)

    def observe_with(self, observers: Sequence[MonitorObserver]) -> None:
        """Push every count and overhead to ``observers`` from now on; one attached now gets the
        failures counted before any observer was (so exporters added after the monitor's
        store failed at start still show it)."""
        new = [obs for obs in observers if all(obs is not old for old in self._observers)]
        self._observers = tuple(observers)
        self._many = tuple(
            getattr(obs, "observe_overheads", None) or self._one_by_one(obs) for obs in self._observers
        )
        for obs in new:
            try:
                for stage, n in self._early.items():
                    for _ in range(n):
                        obs.count_error(stage)
                if self._early_drops:
                    obs.count_drop(self._early_drops)
            except Exception:
                _log.debug("handoffmon observer failed", exc_info=True)

    @staticmethod
    def _one_by_one(obs: MonitorObserver) -> Callable[[Sequence[tuple[str, float]]], None]:
        def observe(items: Sequence[tuple[str, float]]) -> None:
            for stage, seconds in items:
                obs.observe_overhead(stage, seconds)

        return observe

    def count(self, stage: str, n: int = 1) -> None:
        """Count ``n`` failures in ``stage`` (``monitor_errors{stage}``)."""
        try:
            self._aggregates.count_error(stage, n)
        except Exception:  # pragma: no cover - counting must not break the caller
            _log.debug("handoffmon could not count an error", exc_info=True)
        if not self._observers:
            self._early[stage] += n
        for obs in self._observers:
            try:
                for _ in range(n):
                    obs.count_error(stage)
            except Exception:
                _log.debug("handoffmon observer failed", exc_info=True)

    def failed(self, stage: str, exc: BaseException, what: str = "failed open") -> None:
        """Count one exception from ``stage``; log it unless its kind was logged recently.

        Args:
            stage: the monitoring stage (``monitor_errors{stage}``).
            exc: the exception.
            what: what failed, for the log line ("could not read a router response").
        """
        try:
            held = self.logs.allow((stage, type(exc).__name__))
            if held is not None:
                more = f" (+{held} like it since the last line)" if held else ""
                _log.warning("handoffmon %s %s: %r%s", stage, what, exc, more)
        except Exception:  # pragma: no cover - logging must not break the caller
            pass
        self.count(stage)

    def drop(self, n: int = 1) -> None:
        """Count ``n`` turns dropped because a queue was full."""
        self._aggregates.count_dropped(n)
        if not self._observers:
            self._early_drops += n
        for obs in self._observers:
            try:
                obs.count_drop(n)
            except Exception:
                _log.debug("handoffmon observer failed", exc_info=True)

    def observe(self, stage: str, seconds: float) -> None:
        """Record how long ``stage`` took (``overhead_seconds{stage}``)."""
        for obs in self._observers:
            try:
                obs.observe_overhead(stage, seconds)
            except Exception:
                _log.debug("handoffmon observer failed", exc_info=True)

    def observe_many(self, items: Sequence[tuple[str, float]]) -> None:
        """:meth:`observe` for several stages at once (a turn's four overheads): observers
        with ``observe_overheads(items)`` take them in one call; each observer fails alone."""
        for observe in self._many:
            try:
                observe(items)
            except Exception:
                _log.debug("handoffmon observer failed", exc_info=True)
