"""``build_runtime``: the one way every entry point (wrap, LiteLLM callback, serve, demo) builds a runtime."""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, CollectorRegistry

from handoffmon.config import HandoffmonConfig, load_config
from handoffmon.counts import Counts
from handoffmon.errors import ConfigError
from handoffmon.exporters import build_exporters, prometheus_exporter, refit_publisher
from handoffmon.exporters.store_failures import StoreStatsCollector
from handoffmon.labels import MULTIPROC_ENV, LabelGuard
from handoffmon.pipeline import fork
from handoffmon.pipeline.monitor import Monitor
from handoffmon.protocols import AttributionStore, Exporter
from handoffmon.runtime.periodic import PeriodicRefit
from handoffmon.runtime.runtime import Runtime

if TYPE_CHECKING:  # pragma: no cover
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider
    from prometheus_client.registry import Collector

    from handoffmon.checkers import RuleSet
    from handoffmon.refit.result import RefitResult
    from handoffmon.routing import RoutingState
    from handoffmon.runtime.shadow import ShadowRunner

__all__ = ["build_runtime", "shared_runtime"]

_log = logging.getLogger("handoffmon.runtime")


def build_runtime(
    config: HandoffmonConfig | None = None,
    *,
    registry: CollectorRegistry | None = REGISTRY,
    store: AttributionStore | None = None,
    rules: RuleSet | None = None,
    exporters: Sequence[Exporter] = (),
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    logger_provider: Any = None,
    logger: Any = None,
    clock: Callable[[], float] = time.time,
    start: bool = True,
) -> Runtime:
    """Build store, rules, exporters, monitor and refit schedule from ``config``.

    Handoffmon's Prometheus series live in a registry of their own (``runtime.registry``),
    shown inside ``registry`` — by default prometheus_client's global ``REGISTRY``, so an
    application's existing ``/metrics`` shows them, as Python libraries do — and on
    ``telemetry.metrics_port`` when that is set.

    Args:
        config: configuration; ``None`` loads ``$HANDOFFMON_CONFIG`` and ``HANDOFFMON_*``.
        registry: the application's registry to show handoffmon's series in; ``None``
            keeps them private (``handoffmon serve`` renders ``runtime.registry`` itself).
        store: attribution store (default: built from ``config.store``).
        rules: rule set (default: built from ``config.rules``).
        exporters: extra exporters, after the ones ``config.telemetry`` turns on.
        tracer_provider: OpenTelemetry tracer provider (default: the API's global one).
        meter_provider: OpenTelemetry meter provider (default: the API's global one).
        logger_provider: OpenTelemetry logger provider for evaluation events (default:
            the API's global one).
        logger: destination of per-turn log lines (``telemetry.log_turns``).
        clock: wall clock of the pipeline and the refit.
        start: start it now (else call ``runtime.start()``; turns queue up meanwhile).

    Raises:
        ConfigError: a store, rule or port in ``config`` is unusable (names the key).
        HandoffmonError: ``registry`` already shows another runtime's series.
    """
    config = config if config is not None else load_config()
    if config.empty_file is not None:
        _log.warning(
            "handoffmon: config file %s sets nothing (empty or null): every setting not set by a "
            "HANDOFFMON_* variable is its default (store.backend memory, no configured rules)",
            config.empty_file,
        )
    own = CollectorRegistry()
    guard = LabelGuard.from_config(config)  # one cap for exported labels and kept aggregates
    built = build_exporters(
        config,
        registry=own,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        logger_provider=logger_provider,
        logger=logger,
        guard=guard,
    )
    monitor = Monitor(  # builds the store when none is given (ConfigError naming its key)
        config,
        store=store,
        rules=rules,
        exporters=[*built, *exporters],
        clock=clock,
        start=False,
        guard=guard,
    )
    store_stats = getattr(monitor.store, "stats", None)
    if callable(store_stats):
        evictions = getattr(monitor.store, "evictions", None)
        evictions = evictions if callable(evictions) else None
        operations = getattr(monitor.store, "operations", None)
        operations = operations if callable(operations) else None
        if config.telemetry.prometheus:
            own.register(StoreStatsCollector(store_stats, evictions, operations))
        for exporter in monitor.exporters:
            observe_store = getattr(exporter, "observe_store", None)
            if callable(observe_store):  # the OTel exporter: the same counters as observables
                observe_store(store_stats, evictions, operations)
    routing = _routing(config, monitor, own)
    shadow = _shadow(config, monitor, own)
    publish_gauges = refit_publisher(monitor.exporters)
    refit = None
    if config.refit.interval_s > 0:
        snapshot, source, exact = _refit_source(monitor)
        if routing is not None:
            routing.holder.source = source  # tables of any other counts are refused
        refit = PeriodicRefit(
            snapshot,
            lambda result: _publish(publish_gauges, routing, result),
            config.refit.interval_s,
            buckets=config.buckets,
            settings=config.refit,
            clock=clock,
            source=source,
            on_failure=lambda: monitor.count_error("refit"),
            exact=exact,
            repair=exact,  # the only exact source here is the SQLite file, which a crash can tear
        )
    runtime = Runtime(
        config,
        monitor,
        registry=own,
        expose_in=registry,
        refit=refit,
        on_close=_forget,
        routing=routing,
        shadow=shadow,
    )
    if start:
        try:
            runtime.start()
        except Exception:
            runtime.close()  # nothing was queued yet: returns at once
            raise
    return runtime


def _refit_source(monitor: Monitor) -> tuple[Callable[[], Counts], str, bool]:
    """What the periodic refit reads, its ``source`` label and whether the input check treats it
    as exact (``refit(exact=...)``): the monitor's own counts, or,
    when its Prometheus exporter writes ``PROMETHEUS_MULTIPROC_DIR`` (LiteLLM Proxy with
    ``--num_workers``, gunicorn), every worker's counters summed from that directory
    (``sources.multiprocess.multiprocess_counts``), dead workers included, as ``/metrics`` sums them. A
    worker's own counts hold only the turns it served (a proxy with two workers published
    ``handoff_checked_turns`` 67 while the counters summed 120).

    With the SQLite store the workers' aggregates share its file (increments written as deltas
    by every worker), which holds what the directory holds and the history before the last
    restart (LiteLLM empties the directory at start): the refit reads the file then
    (``load_counts_sqlite``, ``source`` ``sqlite``; a worker's unwritten increments wait for
    its next idle turn).

    Every worker then refits the same deployment-wide counts, so whichever worker published
    last (the refit gauges' ``mostrecent`` mode) shows the deployment's refit, and every
    worker's routing table is the deployment's.

    The SQLite file is read as ``handoffmon refit --source sqlite://`` reads it, strictly and as
    exact: a row this release cannot read fails the run (counted as a refit failure) instead of
    being skipped here and refused there; cluster sums no conversations can give, which a
    worker's crash leaves in small cells for good, are repaired and listed in both
    (``input_repaired_cells``, RefitInputRepaired), not a failure of every refit after the
    crash. The directory is approximate (read file by file while workers write), and so is the
    monitor's own snapshot: its counts start with the process while its conversations' state may
    be older (Redis keeps it across restarts and replicas), so its sums can hold conversations
    that straddle its start."""
    exporter = prometheus_exporter(list(monitor.exporters))
    where = os.environ.get(MULTIPROC_ENV)
    if exporter is None or not exporter.multiprocess or not where:
        return monitor.snapshot, "local", False
    if monitor.aggregates.path is not None:
        from handoffmon.pipeline.aggregates import load_counts_sqlite

        return functools.partial(load_counts_sqlite, monitor.aggregates.path, strict=True), "sqlite", True
    from handoffmon.sources.multiprocess import multiprocess_counts

    return functools.partial(multiprocess_counts, where), "multiprocess", False


def _routing(config: HandoffmonConfig, monitor: Monitor, registry: CollectorRegistry) -> RoutingState | None:
    """The routing state when ``routing.enabled`` (its counters shown in ``registry``)."""
    if not config.routing.enabled:
        return None
    from handoffmon.exporters.routing_decisions import RoutingCollector
    from handoffmon.routing import RoutingState

    state = RoutingState(config.routing, on_failure=lambda: monitor.count_error("refit"))
    _expose(
        config,
        monitor,
        registry,
        lambda files: RoutingCollector(state.counts.snapshot, state.table_age_s, files=files),
    )
    return state


def _shadow(config: HandoffmonConfig, monitor: Monitor, registry: CollectorRegistry) -> ShadowRunner | None:
    """The shadow runner when ``shadow.enabled`` (fed by the check stage; its counters shown in
    ``registry``); its threads start with the runtime."""
    if not config.shadow.enabled:
        return None
    from handoffmon.exporters.shadow_calls import ShadowCollector
    from handoffmon.runtime.shadow import ShadowRunner

    runner = ShadowRunner(
        config.shadow,
        on_error=lambda: monitor.count_error("shadow"),
        start=False,
        guard=monitor.guard,
        sink=monitor.count_shadow,
    )
    monitor.set_shadow(runner.offer)
    _expose(config, monitor, registry, lambda files: ShadowCollector(lambda: runner.stats, files=files))
    return runner


def _expose(
    config: HandoffmonConfig,
    monitor: Monitor,
    registry: CollectorRegistry,
    build: Callable[[bool], Collector],
) -> None:
    """Serve a scrape-time collector in ``registry`` (with Prometheus on) and hand it to the
    exporters that mirror collectors (the OTel exporter's ``observe_collector``)."""
    observers = [
        observe
        for exporter in monitor.exporters
        if callable(observe := getattr(exporter, "observe_collector", None))
    ]
    if not (config.telemetry.prometheus or observers):
        return
    collector = build(config.telemetry.prometheus)  # multiprocess files only for Prometheus
    if config.telemetry.prometheus:
        registry.register(collector)
    for observe in observers:
        observe(collector)


def _publish(
    gauges: Callable[[RefitResult], bool], routing: RoutingState | None, result: RefitResult
) -> bool:
    """Hand a refit to the gauges and to the routing table (both always tried)."""
    ok = gauges(result)
    if routing is not None:
        ok = routing.holder.publish(result) and ok
    return ok


_shared: dict[int, Runtime] = {}
_shared_lock = threading.RLock()  # close() inside shared_runtime calls _forget
fork.renew_in_child(_shared_lock)


def shared_runtime(
    config: HandoffmonConfig | None = None, *, registry: CollectorRegistry = REGISTRY
) -> Runtime:
    """The process's runtime for ``registry`` (by default the global ``REGISTRY``), built once.

    ``wrap`` and the LiteLLM Proxy callback use it, so several wrapped routers and clients
    in one process record into one monitor and show one set of series. The registry is
    process-global state by nature (prometheus_client's convention); this keeps exactly
    one handoffmon runtime per registry. A closed runtime (or one whose monitor was
    closed directly) is replaced on the next call.

    Args:
        config: configuration; ``None`` loads ``$HANDOFFMON_CONFIG`` and ``HANDOFFMON_*``.
        registry: the application's registry the runtime shows its series in.

    Raises:
        ConfigError: a runtime with a different configuration already uses ``registry``.
    """
    config = config if config is not None else load_config()
    with _shared_lock:
        runtime = _shared.get(id(registry))
        if runtime is not None and runtime.monitor.closed and not runtime.closed:
            runtime.close(0)  # its monitor was closed directly (wrapped.monitor.close()): retire it
        if runtime is not None and not runtime.closed:
            if runtime.config != config:
                raise ConfigError(
                    "a handoffmon runtime with a different configuration already exports into "
                    "this Prometheus registry; pass it as runtime= to share it, or give this "
                    "one its own registry= (or registry=None)"
                )
            return runtime
        runtime = build_runtime(config, registry=registry)
        _shared[id(registry)] = runtime
        return runtime


def _forget(runtime: Runtime) -> None:
    with _shared_lock:
        for key, value in list(_shared.items()):
            if value is runtime:
                del _shared[key]
