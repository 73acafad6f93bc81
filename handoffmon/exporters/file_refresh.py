"""Writing the scrape-time series to the multiprocess files on a timer, whether turns come or not."""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable

from handoffmon.exporters.logs import get_logger, log_error
from handoffmon.pipeline import fork

FILE_REFRESH_S = 5.0
"""How often, under ``PROMETHEUS_MULTIPROC_DIR``, a process writes its scrape-time series
(``serving.FileMirror``) to the files without a turn: a quiet worker's routing table age, shadow
budget and breaker state are at most this old in a multiprocess ``/metrics`` (a scrape interval is
15-60 s). A write costs ~0.1 ms."""

SYNC_FAILURE_STAGE = "export"
"""The ``handoffmon_monitor_errors_total{stage}`` a failed write of the files counts in: the
Prometheus exporter's work, like its other failures (``ExporterDispatch``); MonitorErrors sees it."""


class FileRefresher:
    """One daemon thread per process that calls ``sync`` every ``interval_s`` while an owner holds it.

    A multiprocess ``/metrics`` reads the files only, so a gauge a worker computes at scrape time
    (the routing table's age) would otherwise stop at its value at the worker's last turn: a quiet
    worker whose refits stopped never looked stale. Owners (the multiprocess
    ``PrometheusExporter``s) are held weakly; the thread ends when the last one releases it or is
    collected, and is started again in a forked child if the parent's was running. A failed write
    is logged once per run of failures and counted every time in
    ``monitor_errors{stage="export"}`` through one owner's ``count_error`` (the owners share the
    process's files: one count per failure, however many exporters hold the thread).

    Args:
        sync: writes the files; returns the first failure (else None), never raises.
        interval_s: seconds between writes.
    """

    def __init__(self, sync: Callable[[], Exception | None], interval_s: float = FILE_REFRESH_S) -> None:
        self._sync = sync
        self.interval_s = interval_s
        self._owners: weakref.WeakSet[object] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._log = get_logger("handoffmon.exporters", exporter="prometheus")
        fork.on_fork(self._after_fork)

    @property
    def running(self) -> bool:
        """Whether the thread is alive."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def hold(self, owner: object) -> None:
        """Keep the thread running while ``owner`` lives and has not released it (starts it)."""
        with self._lock:
            self._owners.add(owner)
            if not self.running:
                self._start()

    def release(self, owner: object, timeout_s: float = 5.0) -> None:
        """``owner`` no longer needs the thread; the last owner's release stops and joins it."""
        with self._lock:
            self._owners.discard(owner)
            if self._owners:
                return
            thread, self._thread = self._thread, None
            self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def _start(self) -> None:
        """Start the thread (under ``_lock``)."""
        self._stop = stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(stop,), name="handoffmon-file-refresh", daemon=True
        )
        self._thread.start()

    def _run(self, stop: threading.Event) -> None:
        failing = False
        while not stop.wait(self.interval_s):
            if not self._owners:  # every owner was collected without a release
                return
            failed = self._sync()
            if failed is not None:
                self._count_failure()
                if not failing:  # logged once per run of failures
                    log_error(self._log, "observe_failed", "export_prometheus", failed)
            failing = failed is not None

    def _count_failure(self) -> None:
        """Count one failed write through the first owner that counts errors (an exporter's
        ``count_error``); a count that fails is dropped (error accounting must not raise)."""
        for owner in list(self._owners):
            count = getattr(owner, "count_error", None)
            if callable(count):
                with contextlib.suppress(Exception):
                    count(SYNC_FAILURE_STAGE)
                return

    def _after_fork(self) -> int:
        """In a forked child (no thread): start it again if an owner lives."""
        self._lock = threading.Lock()
        self._thread = None
        if self._owners:
            with self._lock:
                self._start()
        return 0
