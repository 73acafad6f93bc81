"""The Monitor: ``capture``/``finish`` on the request path; attribution, checks and exports behind queues."""

from __future__ import annotations

import atexit
import logging
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from handoffmon.config import HandoffmonConfig
from handoffmon.counts import Counts, ShadowKey
from handoffmon.errors import ConfigError, CorruptValue, StoreError
from handoffmon.ingress import Outcome, Request, StreamOutcome
from handoffmon.ingress.responses import NoReply
from handoffmon.labels import LabelGuard
from handoffmon.pipeline import fork
from handoffmon.pipeline.aggregates import Aggregates
from handoffmon.pipeline.attribution_stage import AttributionStage
from handoffmon.pipeline.check_stage import CheckStage
from handoffmon.pipeline.dispatch import ExporterDispatch
from handoffmon.pipeline.errors import STAGES, ErrorSink
from handoffmon.pipeline.records import Attributed, Built, Capture, Deferred, Finished, Later
from handoffmon.pipeline.worker import ByteBudget, DequeWorker, WorkerPool
from handoffmon.protocols import (
    AttributionStore,
    CompositeExporter,
    Exporter,
    IdleObserver,
    MonitorObserver,
    NoReplyObserver,
    ShadowPairObserver,
)
from handoffmon.shadow.turns import ShadowOffer, ShadowTurn
from handoffmon.stores.guard import GuardedStore
from handoffmon.stores.memory import MemoryStore

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.checkers import RuleSet

__all__ = ["STAGES", "Monitor", "open_store"]

_log = logging.getLogger("handoffmon.pipeline")


UNWEIGHED_TURNS = 16
"""Turns that may wait for attribution before the next ones weigh their histories
(``Monitor.backlogged``)."""


STORE_KEYS = {"sqlite": "store.path", "redis": "store.url"}
"""The key a store that cannot be built at all points at (a missing directory, a bad URL)."""


def open_store(config: HandoffmonConfig) -> AttributionStore:
    """The store ``config.store`` describes (``Monitor`` and ``build_runtime`` build it so).

    Raises:
        ConfigError: it cannot be built at all (a SQLite file in a missing directory, a bad
            Redis URL), naming its key and the config's source. A store that is built but cannot
            be reached yet fails open instead.
    """
    from handoffmon.stores import make_store

    try:
        return make_store(config.store)
    except StoreError as exc:
        raise ConfigError(
            f"cannot open the {config.store.backend} store: {exc}",
            key=STORE_KEYS.get(config.store.backend, "store"),
            source=config.source,
        ) from exc


class Monitor:
    """The pipeline: one request-path protocol, then background stages behind bounded queues.

    Request path (cheap, never blocks, never raises)::

        capture = monitor.capture(request)        # before the router call (ingress.Request)
        monitor.finish(capture, reply, outcome)   # after it: the reply and who served it

    ``outcome`` is an ``ingress.Outcome``, or a ``Deferred`` to read it on the attribution
    thread. Behind the request path, immutable records go from stage to stage: the
    attribution stage (one thread: attributes the history, reads the outcome, records the
    reply) → the check stage (worker threads sharded by conversation: persist, rules,
    state, aggregates) → one dispatcher per exporter. A full queue drops the turn and
    counts it; every stage reports its failures to one ``ErrorSink``
    (``monitor_errors{stage}``). The ``Runtime`` owns a monitor's life; a bare monitor is
    closed at exit.

    Args:
        config: configuration (defaults when ``None``).
        store: attribution store; built from ``config.store`` when not given. Always run
            behind ``GuardedStore`` (counted, backed off, fail-open).
        rules: the rule set; built from ``config.rules`` when not given.
        exporters: receive every finished turn (:meth:`add_exporter`: an exporter's
            companions come with it, each exporter is registered once).
        clock: wall clock (seconds) for stored authorship and ``TurnRecord.finished_at``.
        start: start the worker threads now (else :meth:`start`; turns queue up meanwhile).
        aggregates: counters to update; SQLite-backed in ``config.store.path`` when the
            store backend is ``sqlite``, memory otherwise.
        guard: caps the model and rule names the aggregates keep (``telemetry.max_models``
            / ``max_rules``, then ``other``); share it with the exporters (the ``Runtime``
            does) so kept and exported names agree. Ignored when ``aggregates`` is given.

    Raises:
        ConfigError: the store to build from ``config.store`` cannot be built at all
            (``open_store``: names the key and the config's source).
    """

    def __init__(
        self,
        config: HandoffmonConfig | None = None,
        *,
        store: AttributionStore | None = None,
        rules: RuleSet | None = None,
        exporters: Sequence[Exporter] = (),
        clock: Callable[[], float] = time.time,
        start: bool = True,
        aggregates: Aggregates | None = None,
        guard: LabelGuard | None = None,
    ) -> None:
        from handoffmon.attribution import Attributor, ModelNames
        from handoffmon.checkers import RuleSet

        self.config = config = config if config is not None else HandoffmonConfig()
        self._clock = clock
        self._closed = False
        self.attribution_overflows = 0
        """Captured turns dropped because the attribution queue (or the byte budget) was full."""
        self.lost_at_close = 0
        """Turns lost at shutdown: still queued when :meth:`close` ran out of time, or finished
        after it (also in ``handoffmon_queue_dropped_total``)."""
        if store is None:  # first: a store path in a missing directory fails before anything opens
            store = open_store(config)
        sqlite_path = config.store.path if config.store.backend == "sqlite" else None
        self.guard = guard if guard is not None else LabelGuard.from_config(config)
        """Caps the names kept in the aggregates (the exporters' guard when shared)."""
        if aggregates is None:
            aggregates = Aggregates(sqlite_path, guard=self.guard, retry_s=config.store.backoff_s)
        self.aggregates = aggregates
        self.errors = ErrorSink(self.aggregates, log_interval_s=config.pipeline.error_log_interval_s)
        self.names = ModelNames(config.attribution.canonical_models)
        self.store = (
            store
            if isinstance(store, GuardedStore)
            else GuardedStore(
                store,
                on_failure=self._store_failed,
                retry_after_s=config.store.backoff_s,
                trip_after=config.store.backoff_after,
            )
        )
        corrupt = getattr(self.aggregates, "corrupt_rows", 0)
        if corrupt:  # unreadable rows of the SQLite aggregates table, skipped at start
            self.store.count("aggregates", CorruptValue.kind, corrupt)
        if getattr(self.aggregates, "open_error", None) is not None:  # counting in memory meanwhile
            self.store.count("aggregates", StoreError.kind)
        open_error = getattr(self.store.inner, "open_error", None)
        if open_error is not None:  # a file that cannot be opened (yet): start failing open
            _log.warning("handoffmon: %s; attribution unknown until it opens (tried again)", open_error)
            self.store.failed_at_start("get", open_error)
        self.rules = rules if rules is not None else RuleSet.for_monitor(config)
        self.attributor = Attributor(
            self.store,
            names=self.names,
            content_fallback=config.attribution.content_fallback,
            clock=clock,
            on_error=lambda stage, exc: self.errors.failed(stage, exc),
            text_cache_bytes=config.attribution.text_cache_bytes,
            pending_max=config.attribution.pending_max,
            conversation_id_key=config.attribution.conversation_id_key,
        )
        self._dispatch: list[ExporterDispatch] = []
        self._idlers: list[Callable[[], None]] = []
        self._no_reply_counters: list[Callable[[str], None]] = []
        self.queued_bytes = ByteBudget(config.pipeline.max_queued_bytes)
        """Bytes of raw bodies the turns on their way through the pipeline hold (``serve``'s),
        taken when a turn is queued and given back once it is checked (or dropped)."""
        checks = CheckStage(
            attributor=self.attributor,
            store=self.store,
            rules=self.rules,
            aggregates=self.aggregates,
            buckets=config.buckets,
            emit=self._emit,
            errors=self.errors,
            capture_content=config.telemetry.capture_content,
            release=self.queued_bytes.give,
        )
        self._checks = checks
        # One check worker (the default) on the in-process memory store: its queue is drained
        # by the attribution thread whenever no captured turn waits (attribution first, so a
        # check backlog waits in the 10,000-slot check queue as it does behind a check thread,
        # not in the attribution queue) instead of a thread of its own, whose polling and GIL
        # hand-offs cost about a poll per turn under load (issue 21). Same order, same queue
        # bound and drop accounting.
        # A store that waits on I/O (SQLite, Redis) keeps the check thread, so attribution
        # goes on while a check waits. On Redis that thread takes the turns queued at once as
        # one batch: two round trips per batch instead of two per turn (each round trip also
        # waits for the GIL twice, which bounded the check rate under load, issue 21).
        driven = config.pipeline.workers == 1 and isinstance(self.store.inner, MemoryStore)
        self._pool: WorkerPool[Attributed] = WorkerPool(
            checks.process,
            workers=config.pipeline.workers,
            queue_size=config.pipeline.queue_size,
            on_error=lambda exc: self.errors.failed("pipeline", exc),
            on_idle=self._on_idle,
            start=start,
            driven=driven,
            batch=checks.process_batch if checks.batched else None,
        )
        attribution = AttributionStage(
            attributor=self.attributor,
            names=self.names,
            errors=self.errors,
            submit=self._to_checks,
            capture_content=config.telemetry.capture_content,
            release=self.queued_bytes.give,
        )
        self._front: DequeWorker[Finished | Later] = DequeWorker(
            attribution.handle,
            queue_size=config.pipeline.attribution_queue_size,
            on_error=self._front_failed,
            name="handoffmon-attribution",
            start=start,
            after=self._pool.drain if driven else None,
            # on Redis, the turns queued at once are looked up in one round trip
            batch=attribution.handle_batch if checks.batched else None,
        )
        for exporter in exporters:
            self.add_exporter(exporter)
        self._atexit = _atexit_closer(self)
        atexit.register(self._atexit)
        fork.track(self)

    # -- request path -------------------------------------------------------------------

    def capture(self, request: Request) -> Capture:
        """Keep a parsed request until its reply arrives (before the router call).

        Costs one small record: the history was copied by the parser and is attributed
        later, on the attribution thread, in order. Never raises.
        """
        return Capture(request, time.perf_counter() - request.received_at)

    def finish(
        self,
        capture: Capture,
        reply: Any,
        outcome: Outcome | Deferred,
        *,
        streamed: bool = False,
        latency_s: float | None = None,
        shadow: ShadowOffer | None = None,
        weight: int = 0,
    ) -> None:
        """Queue a finished reply for attribution and checks. Never blocks, never raises.

        Args:
            capture: what :meth:`capture` returned for the request.
            reply: the assistant message (dict, SDK message or text), taken now.
            outcome: who served it (``Outcome``; raw author names are canonicalized), or a
                ``Deferred`` reading it on the attribution thread — a ``describe`` that
                raises leaves the author ``unknown`` and counts
                ``monitor_errors{stage="integration"}``.
            streamed: the reply was streamed.
            latency_s: wall time of the call; default: since the request was parsed.
            shadow: the integration's offer of a shadow continuation of this turn (only
                when the runtime runs shadow continuation).
            weight: bytes of its own the turn holds until it is checked (raw bodies an
                integration keeps to parse later), within ``pipeline.max_queued_bytes``.

        When the attribution queue is full, its turns already hold ``max_queued_bytes``, or
        the monitor is closed, the turn is dropped and counted: overload sheds monitoring work
        instead of adding it to the request path or to memory.
        """
        t0 = time.perf_counter()
        try:
            if latency_s is None:
                latency_s = t0 - capture.request.received_at
            item = Finished(
                capture,
                reply,
                outcome,
                streamed,
                latency_s,
                self._clock(),
                time.perf_counter() - t0,
                shadow,
                weight,
            )
            self._queue(item, weight)
        except Exception as exc:
            self.errors.failed("record", exc)

    def _queue(self, item: Finished | Later, weight: int, shed: Callable[[], object] | None = None) -> None:
        """Hand a turn to the attribution thread, or drop it (full queue or budget): counted as
        a dropped turn, or by ``shed`` when it is not one."""
        held = not weight or self.queued_bytes.take(weight)
        if held and self._front.submit(item):
            return
        if held:
            self.queued_bytes.give(weight)
        if shed is not None:
            shed()
            return
        if self._closed:  # not an overflow: the turn came after close()
            self.lost_at_close += 1
        else:
            self.attribution_overflows += 1
        self.errors.drop()

    def finish_later(
        self,
        build: Callable[..., Built | None],
        args: tuple[Any, ...],
        *,
        streamed: bool = False,
        weight: int = 0,
        shed: Callable[[], object] | None = None,
    ) -> None:
        """The leanest request path: queue ``build(*args)`` for the attribution thread. Never
        blocks, never raises.

        ``build`` returns what :meth:`capture` and :meth:`finish` would have been given
        (``Built``: the capture, the reply, the outcome, the call's latency, the shadow
        offer), or ``None``; it runs on the attribution thread, in order with every other
        finished turn, and its failures are counted under ``integration``. ``streamed`` and
        ``weight`` as for :meth:`finish`, which sheds turns the same way; ``shed``: called
        instead of counting a dropped turn, for a call that would not be one (a request
        without a reply, whose body is read only to count it).
        """
        t0 = time.perf_counter()
        try:
            item = Later(build, args, self._clock(), time.perf_counter() - t0, streamed, weight)
            self._queue(item, weight, shed)
        except Exception as exc:
            self.errors.failed("record", exc)

    # -- background -----------------------------------------------------------------------

    def _to_checks(self, turn: Attributed, key: str) -> bool:
        """Hand an attributed turn to the check queue; False when it is dropped (the attribution
        stage counts it), which after :meth:`close` is a turn lost at shutdown."""
        if self._pool.submit(turn, key):
            return True
        if self._closed:
            self.lost_at_close += 1
        return False

    def _front_failed(self, exc: BaseException) -> None:  # pragma: no cover - the stage fails open itself
        self.errors.failed("pipeline", exc)
        self.errors.drop()

    def _store_failed(self, op: str, kind: str) -> None:
        self.errors.count("store")

    def _emit(self, result: Any) -> None:
        for d in self._dispatch:
            d.submit(result)

    def _on_idle(self) -> None:
        """A check thread's idle turn: the aggregates' SQLite write, then every ``IdleObserver``
        exporter's batched work."""
        try:
            self.aggregates.flush()
        except Exception as exc:
            self.errors.failed("aggregates", exc)
        for idle in self._idlers:
            try:
                idle()
            except Exception as exc:  # pragma: no cover - observers must not raise
                self.errors.failed("export", exc)

    def set_shadow(self, offer: Callable[[ShadowTurn], None] | None) -> None:
        """Hand every checked turn that carries a shadow offer to ``offer`` (the runtime's
        ``ShadowRunner.offer``; on a check worker thread, must not block); ``None``: stop."""
        self._checks.shadow = offer

    def count_shadow(self, increments: Mapping[ShadowKey, int]) -> None:
        """Count one shadow pair (``PairRecorder.add``'s increments, names capped by ``guard``)
        into the aggregates (and SQLite) and every exporter that is a ``ShadowPairObserver``."""
        self.aggregates.add_shadow(increments)
        for d in self._dispatch:
            if isinstance(d.exporter, ShadowPairObserver):
                d.exporter.count_shadow(increments)

    def count_error(self, stage: str, n: int = 1) -> None:
        """Count one of handoffmon's own failures (``monitor_errors{stage}``); see ``STAGES``."""
        self.errors.count(stage, n)

    def backlogged(self) -> bool:
        """Whether turns are backing up in the pipeline: ``UNWEIGHED_TURNS`` or more waiting for
        or in attribution or the checks (a turn keeps its last user message, and its history
        for shadow continuation or ``capture_content``, until it is checked). Only then does an
        integration weigh the history a turn keeps alive against ``pipeline.max_queued_bytes``
        (``integrations.held.weigh``), so the usual request path skips the scan (the threads
        poll every 2 ms, so a few turns wait even when they keep up) and at most
        ``UNWEIGHED_TURNS`` unweighed histories are held beside the budget, each one the
        application built for a call of its own, whichever stage backs up. Never raises."""
        waiting = self._front.pending()
        return waiting >= UNWEIGHED_TURNS or waiting + self._pool.pending() >= UNWEIGHED_TURNS

    def stream_recordable(self, out: StreamOutcome) -> bool:
        """Count what a folded stream could not read as ``monitor_errors{stage="parse"}``: its
        odd parts, and the reply itself when it passed ``ChunkFolder``'s cap. False for such a
        reply (``too_large``: nothing of it was kept), which the adapter must not record, and
        for a stream whose response finished without a reply (``out.no_reply``: counted by
        :meth:`count_no_reply`)."""
        if out.odd or out.too_large:
            self.errors.count("parse", out.odd + out.too_large)
        if out.no_reply is not None:
            self.count_no_reply(out.no_reply)
            return False
        return not out.too_large

    def no_reply(self, doc: Any) -> bool:
        """Whether ``doc`` — a response as an ``Api.as_chat`` read it — finished without a reply
        (``ingress.responses.NoReply``: a Responses API response ``failed``, ``cancelled`` or
        ``incomplete`` with no output): then it is counted (:meth:`count_no_reply`) and the
        adapter records no turn. Never raises."""
        if type(doc) is not NoReply:
            return False
        self.count_no_reply(doc.status)
        return True

    def count_no_reply(self, status: str) -> None:
        """Count one response that finished without a reply, by its status
        (``handoffmon_responses_without_reply_total{status}``, in every exporter that is a
        ``NoReplyObserver``): an upstream failure, not a turn, so no rule fails for it."""
        for count in self._no_reply_counters:
            try:
                count(status)
            except Exception as exc:  # pragma: no cover - observers must not raise
                self.errors.failed("export", exc)

    # -- control ------------------------------------------------------------------------

    def _after_fork(self) -> int:
        """In a forked child (``pipeline.fork``, its locks renewed already): the pipeline's
        threads started again, the parent's queued turns forgotten (the parent records them);
        how many were."""
        if self._closed:
            return 0
        dropped = self._front.after_fork() + self._pool.after_fork()
        for d in self._dispatch:
            dropped += d.after_fork()
        self.queued_bytes.held = 0
        return dropped

    def start(self) -> None:
        """Start the worker threads (when built with ``start=False``)."""
        self._front.start()
        self._pool.start()

    def add_exporter(self, exporter: Exporter) -> None:
        """Send every turn finished from now on to ``exporter`` as well.

        An exporter that also implements ``MonitorObserver`` receives handoffmon's own
        errors, drops and stage overheads. One that is a ``CompositeExporter`` brings its
        companions, each registered before it unless it already is (``OTelExporter`` its
        ``events``: passed alone, its spans and events are still emitted). An exporter already
        registered is not registered again: it would see every turn twice.
        """
        if any(d.exporter is exporter for d in self._dispatch):
            return
        if isinstance(exporter, CompositeExporter):
            for companion in exporter.companions:
                self.add_exporter(companion)
        self._dispatch.append(
            ExporterDispatch(
                exporter, queue_size=self.config.pipeline.export_queue_size, on_error=self.errors.count
            )
        )
        self.errors.observe_with(
            [d.exporter for d in self._dispatch if isinstance(d.exporter, MonitorObserver)]
        )
        self._idlers = [d.exporter.idle for d in self._dispatch if isinstance(d.exporter, IdleObserver)]
        self._no_reply_counters = [
            d.exporter.count_no_reply for d in self._dispatch if isinstance(d.exporter, NoReplyObserver)
        ]

    @property
    def exporters(self) -> tuple[Exporter, ...]:
        """The registered exporters."""
        return tuple(d.exporter for d in self._dispatch)

    def snapshot(self) -> Counts:
        """All aggregate counters now (turns still queued are not in it yet; see :meth:`flush`)."""
        return self.aggregates.snapshot()

    @property
    def stats(self) -> dict[str, Any]:
        """Monitor health: errors by stage, dropped turns, turns queued or in progress,
        ``attribution_overflows``: turns dropped because the attribution queue was full, and
        ``lost_at_close``: the dropped turns lost at shutdown (:meth:`close`)."""
        snap = self.aggregates.snapshot()
        return {
            "monitor_errors": dict(snap.monitor_errors),
            "dropped": snap.dropped,
            "pending": self._front.pending() + self._pool.pending(),
            "attribution_overflows": self.attribution_overflows,
            "lost_at_close": self.lost_at_close,
        }

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until queued turns are processed and handed to exporters; False on timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        ok = self._front.flush(timeout_s)
        ok = self._pool.flush(left()) and ok
        for d in self._dispatch:
            ok = d.flush(left()) and ok
        return ok

    def close(self, timeout_s: float | None = None) -> None:
        """Drain the queues, shut exporters down, persist aggregates, close the store. Idempotent.

        When the queues do not drain in time, the turns still queued are dropped, each counted
        once in ``handoffmon_queue_dropped_total`` and ``lost_at_close`` (as is each turn
        finished after close), and logged as "N turn(s) lost at shutdown"; a turn a stage is
        handling then is left to finish (or to be dropped and counted by the next stage).

        Args:
            timeout_s: overall budget; defaults to ``pipeline.shutdown_timeout_s``.
        """
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._atexit)
        budget = self.config.pipeline.shutdown_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + budget
        front_ok = self._front.close(budget)  # drains into the pool
        if not (self._pool.close(max(0.0, deadline - time.monotonic())) and front_ok):
            self._lost(budget)
        for d in self._dispatch:
            d.close(max(0.0, deadline - time.monotonic()))
        self._close_storage()

    def _lost(self, budget: float) -> None:
        """The queues did not drain within ``budget``: their turns are dropped and counted, one
        by one, before the exporters close (so a final push carries them)."""
        lost = self._front.abandon() + self._pool.abandon()
        self.lost_at_close += lost
        if lost:
            self.errors.drop(lost)
        _log.warning(
            "handoffmon: %d turn(s) lost at shutdown: the pipeline did not drain within %.1fs "
            "(counted in handoffmon_queue_dropped_total)",
            lost,
            budget,
        )

    def _close_storage(self) -> None:
        try:
            self.aggregates.close()
        except Exception as exc:
            _log.warning("handoffmon could not persist aggregates at close", exc_info=True)
            self.errors.failed("aggregates", exc)
        try:
            self.store.close()
        except Exception:
            _log.warning("handoffmon store close failed", exc_info=True)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _atexit_closer(monitor: Monitor) -> Callable[[], None]:
    """An atexit hook that closes the monitor if it is still alive (holds only a weakref)."""
    ref = weakref.ref(monitor)

    def close() -> None:
        m = ref()
        if m is not None:
            m.close()

    return close
