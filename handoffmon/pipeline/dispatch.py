"""Hands finished turns to exporters, each on its own thread so a slow or hung one stalls nothing else."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from handoffmon.pipeline.worker import WorkerPool
from handoffmon.protocols import Exporter
from handoffmon.types import TurnResult

_log = logging.getLogger("handoffmon.pipeline")


class ExporterDispatch:
    """One exporter behind a bounded queue and a thread.

    An exporter whose class sets ``export_inline = True`` (in-memory work that never waits
    on I/O, like ``PrometheusExporter``) is called on the submitting check thread instead:
    handing each turn to a thread of its own cost more than the export itself (a thread
    wake-up and a GIL hand-off per turn, ~0.3 ms of CPU under ``serve`` load, issue 21).

    Every turn an exporter did not take counts one ``monitor_errors{stage="export"}`` via
    ``on_error``: a failing export (raises or returns False), a turn refused by a full queue
    (the exporter hangs or is too slow), and at a shutdown that does not finish in time each
    turn left behind (queued or in progress). A ``force_flush`` that raises or returns False
    at close counts one more (logged with the exception it raised), a ``shutdown`` that raises
    one more; ``shutdown`` is called after a failed flush too. None of them blocks the
    pipeline. Delivery beyond the exporter (an OpenTelemetry SDK's OTLP exporter failing in its
    own thread) is not seen here.

    Args:
        exporter: the exporter.
        queue_size: results buffered for it before new ones are dropped.
        on_error: called with a stage name and how many failures (``ErrorSink.count``).
    """

    def __init__(self, exporter: Exporter, *, queue_size: int, on_error: Callable[[str, int], None]) -> None:
        self.exporter = exporter
        self._on_error = on_error
        self.inline = getattr(type(exporter), "export_inline", False) is True
        self._pool: WorkerPool[TurnResult] | None = None
        if self.inline:
            return
        self._pool = WorkerPool(
            self._export,
            workers=1,
            queue_size=queue_size,
            on_error=self._raised,
            name=f"handoffmon-export-{type(exporter).__name__}",
        )

    def _export(self, result: TurnResult) -> None:
        if self.exporter.export(result) is False:
            self._on_error("export", 1)

    def _raised(self, exc: BaseException, call: str = "export") -> None:
        _log.warning("handoffmon exporter %s: %s raised %r", type(self.exporter).__name__, call, exc)
        self._on_error("export", 1)

    def submit(self, result: TurnResult) -> None:
        """Queue a result; counts an export error when the exporter's queue is full."""
        if self._pool is None:
            try:  # self._export(result), inlined: once per turn and exporter
                if self.exporter.export(result) is False:
                    self._on_error("export", 1)
            except Exception as exc:  # an inline exporter fails open like a threaded one
                self._raised(exc)
            return
        if not self._pool.submit(result):
            self._on_error("export", 1)

    def after_fork(self) -> int:
        """In a forked child: the exporter's thread started again, the parent's results forgotten."""
        return 0 if self._pool is None else self._pool.after_fork()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until the exporter has taken every queued result."""
        return True if self._pool is None else self._pool.flush(timeout_s)

    def close(self, timeout_s: float | None = None) -> None:
        """Drain, then ``force_flush`` and ``shutdown`` the exporter, all within ``timeout_s``
        (the flush gets what the drain left); a hung one is abandoned."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        if self._pool is not None and not self._pool.close(timeout_s):
            left = max(1, self._pool.pending())  # the turn in progress and those still queued
            _log.warning(
                "handoffmon exporter %s did not finish in time: %d turn(s) not exported",
                type(self.exporter).__name__,
                left,
            )
            self._on_error("export", left)
            return
        budget = 5.0 if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            if self.exporter.force_flush(budget) is False:
                _log.warning(
                    "handoffmon exporter %s: force_flush returned False (timed out or failed)",
                    type(self.exporter).__name__,
                )
                self._on_error("export", 1)
        except Exception as exc:
            self._raised(exc, "force_flush")
        try:  # after a failed flush too: the exporter's threads and files are released either way
            self.exporter.shutdown()
        except Exception as exc:
            self._raised(exc, "shutdown")
