"""``PeriodicRefit``: a daemon thread that refits a counts snapshot every ``interval_s``.

The schedule belongs to the runtime (``Runtime`` builds one from ``refit.*``); the refit
itself (``handoffmon.refit.refit``) stays pure: counts in, result out.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from handoffmon.config import RefitConfig
from handoffmon.counts import Counts
from handoffmon.depth import DepthBuckets
from handoffmon.refit.result import RefitResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RefitStats:
    """Counters of a ``PeriodicRefit`` (read with ``PeriodicRefit.stats``)."""

    runs: int
    failures: int
    last_success_at: float | None
    last_duration_s: float | None
    last_error: str | None
    empty_runs: int = 0
    """Runs that found no checks in the snapshot (nothing refitted or published)."""


class PeriodicRefit:
    """Refit ``snapshot()`` every ``interval_s`` seconds and hand the result to ``publish``.

    Failures (in the snapshot, the refit or the publisher) are counted, logged and passed
    to ``on_failure``, never raised: a broken refit must not take the monitor down.

    Args:
        snapshot: returns the current ``Counts`` (e.g. the local aggregates' snapshot).
        publish: receives every ``RefitResult`` (e.g. sets the refit gauges); an
            explicit ``False`` return (as ``publish_refit`` gives) counts as a failure.
        interval_s: seconds between the end of a refit and the start of the next; must be > 0
            for ``start``. A refit that took longer than this is followed by a pause as long
            as it took, so the schedule never keeps more than half a core busy.
        buckets: depth buckets the counts use.
        settings: refit settings (``min_n``, ``confidence``, ``ridge``).
        clock: wall clock for ``created_at`` (injected for tests).
        source: label recorded in each result.
        on_failure: called (never raising into the loop) after each failed refit; the
            runtime counts it as ``handoffmon_monitor_errors_total{stage="refit"}``.
        exact: the snapshot holds totals at rest (a SQLite file): cluster sums are checked at
            the exact slack, as ``handoffmon refit`` checks that file.
        repair: with ``exact``, cells no conversations can give are repaired and listed in the
            result (``input_repaired_cells``: RefitInputRepaired) instead of failing the run: a
            worker's crash leaves small cells of a SQLite file so for good
            (``handoffmon.refit.inputs``), and ``handoffmon refit`` reads that file the same way.
            Without ``exact`` they are always repaired and listed.
    """

    def __init__(
        self,
        snapshot: Callable[[], Counts],
        publish: Callable[[RefitResult], object],
        interval_s: float,
        *,
        buckets: DepthBuckets,
        settings: RefitConfig | None = None,
        clock: Callable[[], float] = time.time,
        source: str = "local",
        on_failure: Callable[[], object] | None = None,
        exact: bool = False,
        repair: bool = False,
    ) -> None:
        self._snapshot = snapshot
        self._publish = publish
        self.interval_s = float(interval_s)
        self._buckets = buckets
        self._settings = settings or RefitConfig()
        self._clock = clock
        self._source = source
        self._on_failure = on_failure
        self.exact = exact
        self.repair = repair
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._runs = 0
        self._failures = 0
        self._empty_runs = 0
        self._last_success_at: float | None = None
        self._last_duration_s: float | None = None
        self._last_error: str | None = None
        self.last_result: RefitResult | None = None

    @property
    def stats(self) -> RefitStats:
        """Runs, failures and the last outcome."""
        with self._lock:
            return RefitStats(
                self._runs,
                self._failures,
                self._last_success_at,
                self._last_duration_s,
                self._last_error,
                self._empty_runs,
            )

    @property
    def running(self) -> bool:
        """Whether the background thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def run_once(self) -> RefitResult | None:
        """Snapshot, refit and publish once; returns the result, or None on failure and when
        the snapshot holds no checks yet.

        A snapshot with no checks (a fresh process before its first checked turn) is neither
        refitted nor published: a refit of nothing would stamp a refit success and publish an
        empty pair-risk table (the routing policy would read "a table with no pairs" instead of
        ``no_table``), as ``handoffmon refit`` refuses it (exit 4). It is counted as a run
        (``stats.empty_runs``), not a failure."""
        from handoffmon.refit import refit

        started = time.perf_counter()
        try:
            counts = self._snapshot()
            if not any(counts.checks.values()):  # no key, or only keys counting 0 checks
                with self._lock:
                    self._runs += 1
                    self._empty_runs += 1
                log.debug("handoffmon refit skipped: no checks yet")
                return None
            result = refit(
                counts,
                buckets=self._buckets,
                settings=self._settings,
                source=self._source,
                now=self._clock(),
                exact=self.exact,
                repair=self.repair,
            )
            if self._publish(result) is False:
                raise RuntimeError("publisher reported failure")
        except Exception as exc:  # fail-open: counted and logged, never raised
            self._failed(exc)
            return None
        with self._lock:
            self._runs += 1
            self._last_success_at = result.created_at
            self._last_duration_s = time.perf_counter() - started
            self._last_error = None
            self.last_result = result
        return result

    def _failed(self, exc: Exception) -> None:
        with self._lock:
            self._runs += 1
            self._failures += 1
            self._last_error = f"{type(exc).__name__}: {exc}"
        log.warning("handoffmon refit failed: %s", exc, exc_info=True)
        if self._on_failure is not None:
            with contextlib.suppress(Exception):  # error accounting must not break the loop
                self._on_failure()

    def start(self) -> None:
        """Start the background thread (idempotent). The first refit runs after one interval."""
        if self.interval_s <= 0:
            raise ValueError("PeriodicRefit.interval_s must be > 0 to start")
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="handoffmon-refit", daemon=True)
        self._thread.start()

    def after_fork(self) -> None:
        """In a forked child: the schedule's thread started again if it ran in the parent."""
        if self._thread is not None and not self._stop.is_set():
            self._thread = None
            self.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread and wait up to ``timeout_s`` for a refit in progress."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _loop(self) -> None:
        pause = self.interval_s
        while not self._stop.wait(pause):
            started = time.monotonic()
            self.run_once()
            # a refit slower than the interval (a large fleet, a slow snapshot) is followed by
            # a pause at least as long as it took: the schedule takes at most half a core
            pause = max(self.interval_s, time.monotonic() - started)
