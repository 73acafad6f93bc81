"""``ErrorSink``: the one place the pipeline's own failures, drops and overheads are counted.

Every stage (attribution, checks, exports, the store guard, the refit schedule, the
adapters) reports here; it counts ``monitor_errors{stage}`` and queue drops in the
aggregates and pushes them to every exporter that observes monitor health.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from handoffmon.pipeline.aggregates import Aggregates
from handoffmon.protocols import MonitorObserver
from handoffmon.types import MONITOR_STAGES

_log = logging.getLogger("handoffmon.pipeline")

STAGES = MONITOR_STAGES
"""Stages ``monitor_errors`` is counted by (``types.MONITOR_STAGES``: exported at 0 from the start)."""


class ErrorSink:
    """Counts failures by stage, drops and stage overheads; never raises.

    Args:
        aggregates: where ``monitor_errors`` and drops are counted.
    """

    def __init__(self, aggregates: Aggregates) -> None:
        self._aggregates = aggregates
        self._observers: tuple[MonitorObserver, ...] = ()

    def observe_with(self, observers: Sequence[MonitorObserver]) -> None:
        """Push every count and overhead to ``observers`` from now on."""
        self._observers = tuple(observers)

    def count(self, stage: str, n: int = 1) -> None:
        """Count ``n`` failures in ``stage`` (``monitor_errors{stage}``)."""
        try:
            self._aggregates.count_error(stage, n)
        except Exception:  # pragma: no cover - counting must not break the caller
            _log.debug("handoffmon could not count an error", exc_info=True)
        for obs in self._observers:
            try:
                for _ in range(n):
                    obs.count_error(stage)
            except Exception:
                _log.debug("handoffmon observer failed", exc_info=True)

    def failed(self, stage: str, exc: BaseException) -> None:
        """Log and count one exception from ``stage``."""
        _log.warning("handoffmon %s failed open: %r", stage, exc)
        self.count(stage)

    def drop(self, n: int = 1) -> None:
        """Count ``n`` turns dropped because a queue was full."""
        self._aggregates.count_dropped(n)
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
