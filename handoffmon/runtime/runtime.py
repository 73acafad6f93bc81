"""``Runtime``: the one object owning a monitor's life — exporters, /metrics, refit, close/drain."""

from __future__ import annotations

import atexit
import contextlib
import logging
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from handoffmon.config import HandoffmonConfig
from handoffmon.counts import Counts
from handoffmon.errors import HandoffmonError, StoreError
from handoffmon.exporters.serving import MetricsServer
from handoffmon.pipeline import fork
from handoffmon.pipeline.monitor import Monitor
from handoffmon.protocols import Exporter
from handoffmon.runtime import exposure, signals
from handoffmon.runtime.periodic import PeriodicRefit

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.refit.result import RefitResult
    from handoffmon.routing import RoutingState
    from handoffmon.runtime.shadow import ShadowRunner

_log = logging.getLogger("handoffmon.runtime")


class Runtime:
    """A running monitor and everything around it; build it with ``build_runtime``.

    ``start`` starts the pipeline threads and the periodic refit, registers handoffmon's
    registry inside the application's Prometheus registry and serves it on
    ``telemetry.metrics_port`` when set; ``close`` undoes all of it after draining the
    queued turns. Both are idempotent. An unclosed runtime is closed at interpreter exit,
    and on SIGTERM when nothing else in the process handles that signal.

    Args:
        config: the configuration everything was built from.
        monitor: the pipeline (request-path protocol and background stages).
        registry: handoffmon's own Prometheus registry (its series live only here).
        expose_in: the application's registry to show ``registry`` in (``None``: private).
        refit: the periodic refit (``None`` when ``refit.interval_s`` is 0).
        on_close: called once after ``close`` (``shared_runtime`` forgets the runtime).
        routing: the risk-aware fallback ordering state (``None`` unless ``routing.enabled``);
            the periodic refit publishes its table.
        shadow: shadow continuation (``None`` unless ``shadow.enabled``); its pairs are
            counted by the monitor (``Monitor.count_shadow``) like every other count.
    """

    def __init__(
        self,
        config: HandoffmonConfig,
        monitor: Monitor,
        *,
        registry: CollectorRegistry,
        expose_in: CollectorRegistry | None,
        refit: PeriodicRefit | None,
        on_close: Callable[[Runtime], None] | None = None,
        routing: RoutingState | None = None,
        shadow: ShadowRunner | None = None,
    ) -> None:
        self.config = config
        self.routing = routing
        self.shadow = shadow
        self.monitor = monitor
        self.registry = registry
        self._expose_in = expose_in
        self._nested: exposure.NestedRegistry | None = None
        self.refit = refit
        self.metrics_server: MetricsServer | None = None
        self._on_close = on_close
        self._lock = threading.Lock()
        self._started = False
        self._closed = False
        self._atexit = _atexit_closer(self)
        fork.track(self)

    @property
    def exporters(self) -> tuple[Exporter, ...]:
        """The exporters every finished turn goes to."""
        return self.monitor.exporters

    @property
    def started(self) -> bool:
        """Whether ``start`` ran (and ``close`` has not)."""
        return self._started and not self._closed

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called."""
        return self._closed

    def start(self) -> Runtime:
        """Start everything (idempotent); returns the runtime.

        A store that does not answer at start (Redis down) does not stop it: the monitor starts
        degraded, failing open (attribution unknown until the store answers), with a warning,
        and the failure counted (``store_failures_total{op="get"}``,
        ``monitor_errors{stage="store"}``) and shown by ``/readyz`` (``store: failing_open``)
        from the first scrape, not from the first request.

        Raises:
            HandoffmonError: the application's registry already shows handoffmon series, or
                the runtime was closed (a closed runtime records nothing: build a new one).
            ConfigError: ``telemetry.metrics_port`` cannot be bound.
        """
        with self._lock:
            if self._closed:
                raise HandoffmonError(
                    "this handoffmon runtime is closed and cannot start again: build a new one "
                    "(build_runtime, or shared_runtime, which replaces a closed runtime)"
                )
            if self._started:
                return self
            if self._expose_in is not None and self.config.telemetry.prometheus:
                self._nested = exposure.expose(self.registry, self._expose_in)
            try:
                self.metrics_server = exposure.serve_port(
                    self.registry, self.config.telemetry, self.config.source
                )
            except Exception:
                self._unexpose()
                raise
            self.monitor.start()
            self._probe_store()
            if self.shadow is not None:
                self.shadow.start()
            if self.refit is not None:
                self.refit.start()
            self._started = True
        atexit.register(self._atexit)
        signals.drain_on_sigterm(self)
        return self

    def _probe_store(self) -> None:
        """Ask the store whether it answers (``GuardedStore.probe``: Redis's ping, bounded by
        ``store.timeout_s``); when it does not, warn and count it as a failed call, so the
        monitor is seen failing open before traffic comes. Never raises."""
        store = self.monitor.store
        probe = getattr(store, "probe", None)
        failed_at_start = getattr(store, "failed_at_start", None)
        if not callable(probe) or not callable(failed_at_start) or not getattr(store, "healthy", True):
            return  # no probe, or already failing open and counted (a SQLite file that did not open)
        try:
            if probe():
                return
            # why (a refused connection, or an answer refusing: a database index out of range,
            # a wrong password), so the operator does not look at the network for a wrong URL
            why = getattr(store, "ping_error", None)
            _log.warning(
                "handoffmon: the %s store does not answer at start%s; running degraded (failing open: "
                "attribution unknown until it answers, tried again every %.1fs)",
                self.config.store.backend,
                f" ({why})" if isinstance(why, str) and why else "",
                self.config.store.backoff_s,
            )
            failed_at_start(
                "get", StoreError(f"the {self.config.store.backend} store did not answer at start")
            )
        except Exception:  # pragma: no cover - probe never raises; start must not either
            _log.warning("handoffmon could not probe the store at start", exc_info=True)

    def _after_fork(self) -> int:
        """In a forked child (``pipeline.fork``; the monitor restarts itself): the shadow threads
        and the refit schedule started again. The metrics port stays the parent's."""
        if not self.started:
            return 0
        if self.refit is not None:
            self.refit.after_fork()
        return self.shadow.after_fork() if self.shadow is not None else 0

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until queued turns reached the exporters and their shadow calls finished; False on timeout.

        Streams the application dropped before finishing them count: their turns are queued
        first (``_settle_streams``)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        ok = _settle_streams(timeout_s)
        ok = self.monitor.flush(None if deadline is None else max(0.0, deadline - time.monotonic())) and ok
        if self.shadow is not None:
            ok = self.shadow.flush(None if deadline is None else max(0.0, deadline - time.monotonic())) and ok
        return ok

    def snapshot(self) -> Counts:
        """The monitor's counts (with the shadow pairs when shadow continuation runs)."""
        return self.monitor.snapshot()

    def refit_now(self) -> RefitResult | None:
        """Run the refit once now and publish it (``None`` without a schedule or on failure)."""
        return self.refit.run_once() if self.refit is not None else None

    def close(self, timeout_s: float | None = None) -> None:
        """Stop the refit, drain the pipeline, stop serving and unregister; idempotent.

        Args:
            timeout_s: budget for draining; defaults to ``pipeline.shutdown_timeout_s``.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self._atexit)
        signals.forget(self)
        if self.refit is not None:
            self.refit.stop()
        started = time.monotonic()
        budget = self.config.pipeline.shutdown_timeout_s if timeout_s is None else timeout_s
        if not _settle_streams(budget):  # their turns are queued before the pipeline drains
            _log.warning("handoffmon: reports of dropped streams did not finish within %.1fs", budget)
        # the monitor drains the check stage, which feeds the shadow runner
        self.monitor.close(max(0.0, budget - (time.monotonic() - started)))
        if self.shadow is not None:
            self.shadow.close(max(0.0, budget - (time.monotonic() - started)))
        if self.metrics_server is not None:
            self.metrics_server.close()
        self._unexpose()
        _log.debug("handoffmon runtime closed in %.3fs", time.monotonic() - started)
        if self._on_close is not None:
            self._on_close(self)

    def _unexpose(self) -> None:
        if self._nested is not None and self._expose_in is not None:
            with contextlib.suppress(KeyError):  # the application removed it already
                self._expose_in.unregister(self._nested)
            self._nested = None

    def __enter__(self) -> Runtime:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "started" if self._started else "built"
        port = f", metrics={self.metrics_server.url}" if self.metrics_server is not None else ""
        return f"Runtime({state}, store={self.config.store.backend}{port})"


def _settle_streams(timeout_s: float | None) -> bool:
    """Queue the turns of streams the application dropped unfinished (their finalizers only
    leave a report, made on a normal stack later: ``integrations.streaming``); False when a
    report another thread was making outlasted ``timeout_s``. Nothing to do when no wrapper
    ever made a stream (the module is not loaded)."""
    streaming = sys.modules.get("handoffmon.integrations.streaming")
    if streaming is None:
        return True
    try:
        return bool(streaming.settle(timeout_s))
    except Exception:  # pragma: no cover - settle never raises; flush and close must not either
        _log.warning("handoffmon could not report dropped streams", exc_info=True)
        return False


def _atexit_closer(runtime: Runtime) -> Callable[[], None]:
    """An atexit hook that closes the runtime if it is still alive (holds only a weakref)."""
    ref = weakref.ref(runtime)

    def close() -> None:
        rt = ref()
        if rt is not None:
            rt.close()

    return close
