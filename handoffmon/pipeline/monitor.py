"""The Monitor: begin/finish on the request path, everything else on the background pipeline."""

from __future__ import annotations

import atexit
import dataclasses
import logging
import time
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from handoffmon.config import HandoffmonConfig
from handoffmon.counts import Counts
from handoffmon.pipeline.aggregates import Aggregates
from handoffmon.pipeline.dispatch import ExporterDispatch
from handoffmon.pipeline.reply import last_user_text, reply_text
from handoffmon.pipeline.request_meta import turn_metadata
from handoffmon.pipeline.turn import Capture, Described, PendingTurn, TurnProcessor
from handoffmon.pipeline.worker import DequeWorker, WorkerPool
from handoffmon.protocols import AttributionStore, Exporter, MonitorObserver
from handoffmon.types import UNKNOWN_MODEL, TurnContext

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.checkers import RuleSet
    from handoffmon.refit.periodic import PeriodicRefit

_log = logging.getLogger("handoffmon.pipeline")

STAGES = ("attribution", "record", "persist", "state", "rules", "check", "pipeline", "export", "aggregates")
"""Stages that ``monitor_errors`` is counted by (``integration`` is added by the wrappers)."""


class Monitor:
    """Attributes turns on the request path and processes them in the background.

    ``begin`` (before the router call) and ``finish`` (after it) are the only calls on the
    request path; both are cheap, never block and never raise. Everything else — storing
    authorship, running the rules, updating aggregates, exporting — runs on worker
    threads behind a bounded queue; when it is full the turn is dropped and counted.

    Args:
        config: configuration (defaults when ``None``).
        store: attribution store; built from ``config.store`` when not given.
        rules: the rule set; built from ``config.rules`` when not given.
        exporters: receive every finished turn (each on its own thread).
        clock: wall clock (seconds) for stored authorship and ``TurnRecord.finished_at``
            (latencies use ``time.perf_counter``).
        start: start the worker threads now (else :meth:`start`; turns queue up meanwhile).
        aggregates: counters to update; SQLite-backed in ``config.store.path`` when the
            store backend is ``sqlite``, memory otherwise.
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
    ) -> None:
        from handoffmon.attribution import Attributor, ModelNames, caller_conversation_id, normalize_messages
        from handoffmon.checkers import RuleSet

        self.config = config = config if config is not None else HandoffmonConfig()
        self._clock = clock
        self._caller_id = caller_conversation_id
        self._normalize = normalize_messages
        self._capture_content = config.telemetry.capture_content
        self._trace = config.telemetry.otel
        self._header_name = config.attribution.conversation_header
        self._closed = False
        self.attribution_overflows = 0
        """Captured turns dropped because the attribution queue was full."""
        self.names = ModelNames(config.attribution.canonical_models)
        if store is None:
            from handoffmon.stores import make_store

            store = make_store(config.store)
        self.store: AttributionStore = store
        self.rules = rules if rules is not None else RuleSet.for_monitor(config)
        sqlite_path = config.store.path if config.store.backend == "sqlite" else None
        self.aggregates = aggregates if aggregates is not None else Aggregates(sqlite_path)
        self.attributor = Attributor(
            self.store,
            names=self.names,
            content_fallback=config.attribution.content_fallback,
            clock=clock,
            on_error=self._attribution_error,
            text_cache_bytes=config.attribution.text_cache_bytes,
            pending_max=config.attribution.pending_max,
        )
        self._dispatch: list[ExporterDispatch] = []
        self._observers: tuple[MonitorObserver, ...] = ()
        self._refit: PeriodicRefit | None = None
        self._pool = self._build_pool(start)
        # The attribution stage: one thread, so replies are recorded in the order the
        # application received them and each history is attributed after its predecessor.
        self._front: DequeWorker[PendingTurn] = DequeWorker(
            self._attribute_queued,
            queue_size=config.pipeline.attribution_queue_size,
            on_error=self._pipeline_error,
            name="handoffmon-attribution",
            start=start,
        )
        for exporter in exporters:
            self.add_exporter(exporter)
        self._atexit = _atexit_closer(self)
        atexit.register(self._atexit)

    def _build_pool(self, start: bool) -> WorkerPool[PendingTurn]:
        """The background stages behind the bounded, conversation-sharded queue."""
        config = self.config
        processor = TurnProcessor(
            attributor=self.attributor,
            store=self.store,
            rules=self.rules,
            aggregates=self.aggregates,
            buckets=config.buckets,
            emit=self._emit,
            count_error=self.count_error,
            observe=self._observe,
            capture_content=config.telemetry.capture_content,
        )
        return WorkerPool(
            processor.process,
            workers=config.pipeline.workers,
            queue_size=config.pipeline.queue_size,
            on_error=self._pipeline_error,
            on_idle=self._flush_aggregates,
            start=start,
        )

    # -- request path -------------------------------------------------------------------

    def begin(
        self,
        messages: Sequence[Any],
        *,
        requested_model: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> TurnContext:
        """Attribute the request history before the router is called. Never raises.

        Args:
            messages: the request's chat messages (dicts or SDK objects).
            requested_model: the model or group the application asked for.
            metadata: request metadata (conversation id, rules, tags, route); only the
                keys in ``request_meta.KEPT_KEYS`` stay on the context.
            headers: request headers (conversation id header).

        Returns:
            The turn's context; a degraded one (prefix ``unknown``) if attribution failed.
        """
        t0 = time.perf_counter()
        try:
            conversation_id = self._caller_id(
                headers=headers, metadata=metadata, header_name=self._header_name
            )
            meta = turn_metadata(metadata, headers, trace=self._trace)
            return self._attributed(messages, requested_model, conversation_id, meta, None, t0)
        except Exception:
            _log.warning("handoffmon attribution failed; turn continues unattributed", exc_info=True)
            self.count_error("attribution")
            return self._degraded(messages, requested_model, metadata, headers)

    def capture(
        self,
        messages: Sequence[Any],
        *,
        requested_model: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Capture | TurnContext:
        """The request-path half of :meth:`begin`: keep the history, attribute it later.

        What the integrations call. Costs a list copy and a metadata lookup whatever the
        history's length; the history is attributed on the attribution thread after
        :meth:`finish` (in order, before the reply is recorded), so depth, prefix model
        and handoff are the same as with :meth:`begin`. Pass the result to
        :meth:`finish`. Never raises.

        Args:
            messages: the request's chat messages (dicts or SDK objects).
            requested_model: the model or group the application asked for.
            metadata: request metadata (see :meth:`begin`).
            headers: request headers (conversation id header, ``traceparent``).

        Returns:
            A ``Capture``; a degraded ``TurnContext`` if even that failed.
        """
        t0 = time.perf_counter()
        try:
            conversation_id = (
                self._caller_id(headers=headers, metadata=metadata, header_name=self._header_name)
                if headers or metadata
                else None
            )
            meta = (
                turn_metadata(metadata, headers, trace=self._trace)
                if headers or metadata or self._trace
                else {}
            )
            return Capture(
                list(messages),
                requested_model,
                conversation_id,
                meta,
                time.monotonic(),
                time.perf_counter() - t0,
            )
        except Exception:
            _log.warning("handoffmon could not capture a request; turn continues unattributed", exc_info=True)
            self.count_error("attribution")
            return self._degraded(messages, requested_model, metadata, headers)

    def _attributed(
        self,
        messages: Sequence[Any],
        requested_model: str | None,
        conversation_id: str | None,
        meta: dict[str, Any],
        started_at: float | None,
        t0: float,
    ) -> TurnContext:
        """Attribute a history and fill the monitor-side fields of its context.

        ``attribution_s`` is the time since ``t0`` (perf_counter) when it is done.
        """
        ctx = self.attributor.attribute(
            messages,
            conversation_id=conversation_id,
            requested_model=requested_model,
            metadata=meta,
            started_at=started_at,
        )
        # The context is fresh and not yet shared: fill the monitor-side fields in place
        # (dataclasses.replace would cost several µs).
        object.__setattr__(ctx, "user_message", last_user_text(messages))
        if self._capture_content:
            object.__setattr__(ctx, "input_messages", tuple(self._normalize(messages)))
        object.__setattr__(ctx, "attribution_s", time.perf_counter() - t0)
        return ctx

    def _degraded(
        self,
        messages: Sequence[Any],
        requested_model: str | None,
        metadata: Mapping[str, Any] | None,
        headers: Mapping[str, str] | None,
    ) -> TurnContext:
        """The attribution's fail-open context, under a fresh id so no state is shared."""
        from handoffmon.attribution import degraded_context

        try:
            user = last_user_text(messages)
        except Exception:
            user = ""
        ctx = degraded_context(
            messages,
            conversation_id=f"degraded-{uuid.uuid4().hex}",
            requested_model=requested_model,
            metadata=turn_metadata(metadata, None, trace=False),
            started_at=time.monotonic(),
        )
        return dataclasses.replace(ctx, conversation_id_source="derived", user_message=user)

    def finish(
        self,
        ctx: TurnContext | Capture,
        reply: Any,
        *,
        authors: Sequence[str],
        deployment_id: str | None = None,
        fallbacks: int = 0,
        retries: int = 0,
        streamed: bool = False,
        latency_s: float | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        finish_reason: str | None = None,
        provider: str | None = None,
        response_model: str | None = None,
    ) -> None:
        """Record the reply (so the next request can attribute it) and queue the rest.

        Never blocks and never raises. ``authors`` are raw names (deployment ids or
        provider model names) and are canonicalized. With a ``TurnContext`` from
        :meth:`begin` the reply is recorded here; with a ``Capture`` from :meth:`capture`
        the turn goes to the attribution thread, which attributes the history and then
        records the reply — unless its queue is full: then the turn is dropped and counted
        (and its reply stays unknown to later turns).
        """
        t0 = time.perf_counter()
        try:
            if type(ctx) is Capture:
                turn = self._captured_turn(ctx, reply, streamed, latency_s)
                turn.apply(
                    Described(
                        tuple(authors),
                        deployment_id,
                        fallbacks,
                        retries,
                        provider,
                        response_model,
                        input_tokens,
                        output_tokens,
                        finish_reason,
                    )
                )
                self._submit_captured(turn, t0)
                return
            assert isinstance(ctx, TurnContext)
            canon = self._canonical(authors)
            recorded = self._record(ctx, reply, canon)
            if latency_s is None:
                latency_s = max(0.0, time.monotonic() - ctx.started_at) if ctx.started_at else 0.0
            turn = PendingTurn(
                ctx=ctx,
                recorded=recorded,
                reply_text=reply_text(reply),
                authors=canon,
                deployment_id=deployment_id,
                fallbacks=fallbacks,
                retries=retries,
                streamed=streamed,
                latency_s=latency_s,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                finish_reason=finish_reason,
                provider=provider,
                response_model=response_model,
                finished_at=self._clock(),
                finish_s=time.perf_counter() - t0,
                begin_s=ctx.attribution_s,
            )
            self._queue(turn)
        except Exception:
            _log.warning("handoffmon finish failed", exc_info=True)
            self.count_error("record")

    def finish_described(
        self,
        ctx: TurnContext | Capture,
        reply: Any,
        describe: Callable[..., Described],
        args: tuple[Any, ...],
        *,
        latency_s: float | None = None,
        streamed: bool = False,
    ) -> None:
        """:meth:`finish`, with who served the reply read later: ``describe(*args)``.

        For a captured turn, ``describe`` runs on the attribution thread, so reading the
        response's metadata (deployment, fallbacks, usage) costs the request path
        nothing; it must only read what it is given. ``reply`` is taken now (the
        application may edit its response afterwards). Never blocks and never raises;
        a ``describe`` that raises leaves the turn's author ``unknown`` and counts
        ``monitor_errors{stage="integration"}``.
        """
        t0 = time.perf_counter()
        try:
            if type(ctx) is Capture:
                turn = self._captured_turn(ctx, reply, streamed, latency_s)
                turn.describe, turn.describe_args = describe, args
                self._submit_captured(turn, t0)
                return
            d = self._described(describe, args)
            self.finish(ctx, reply, **d._asdict(), streamed=streamed, latency_s=latency_s)
        except Exception:
            _log.warning("handoffmon finish failed", exc_info=True)
            self.count_error("record")

    def _described(self, describe: Callable[..., Described], args: tuple[Any, ...]) -> Described:
        try:
            return describe(*args)
        except Exception:
            _log.warning("handoffmon could not read who served a reply", exc_info=True)
            self.count_error("integration")
            return Described()

    def _captured_turn(
        self, cap: Capture, reply: Any, streamed: bool, latency_s: float | None
    ) -> PendingTurn:
        if latency_s is None:
            latency_s = max(0.0, time.monotonic() - cap.started_at)
        # Positional, in PendingTurn's field order: ctx, recorded, reply_text, authors,
        # deployment_id, fallbacks, retries, streamed, latency_s, input/output tokens,
        # finish_reason, provider, response_model, finished_at, finish_s, begin_s, capture,
        # reply (keywords cost ~1 µs more on the request path). The serving fields are
        # filled by ``apply`` here or on the attribution thread.
        return PendingTurn(
            None,
            None,
            "",
            (),
            None,
            0,
            0,
            streamed,
            latency_s,
            None,
            None,
            None,
            None,
            None,
            self._clock(),
            0.0,
            cap.begin_s,
            cap,
            reply,
        )

    def _submit_captured(self, turn: PendingTurn, t0: float) -> None:
        """Queue a captured turn for the attribution thread; see :meth:`_overflow` if it is full."""
        turn.finish_s = time.perf_counter() - t0
        if not self._front.submit(turn):
            self._overflow()

    def _overflow(self) -> None:
        """The attribution queue is full (or closed): shed the turn, count it dropped.

        Overload sheds monitoring work instead of adding it to the request path: the turn
        is neither checked nor recorded, so a later request of its conversation sees this
        reply as ``unknown`` (counted in the attribution methods). Attributing it here
        instead would cost the full history hash on the request path exactly when the
        process is saturated.
        """
        self.attribution_overflows += 1
        self._count_drop()

    def _canonical(self, authors: Sequence[str]) -> tuple[str, ...]:
        return tuple(self.names.canonical(a) for a in authors if a) or (UNKNOWN_MODEL,)

    def _record(self, ctx: TurnContext, reply: Any, canon: tuple[str, ...]) -> Any:
        try:
            return self.attributor.record(ctx, reply, canon)
        except Exception:
            _log.warning("handoffmon could not record a reply", exc_info=True)
            self.count_error("record")
            return None

    def _queue(self, turn: PendingTurn) -> None:
        """Hand an attributed turn to the checking pipeline (or count it dropped)."""
        assert turn.ctx is not None
        key = turn.recorded.conversation_id if turn.recorded is not None else turn.ctx.conversation_id
        if not self._pool.submit(turn, key):
            self._count_drop()

    # -- attribution stage ----------------------------------------------------------------

    def _attribute_queued(self, turn: PendingTurn) -> None:
        """The attribution thread's handler: every turn it takes is queued or counted."""
        try:
            self._attribute_turn(turn)
        except Exception as exc:  # pragma: no cover - _attribute_turn fails open itself
            self._pipeline_error(exc)
            self._count_drop()

    def _attribute_turn(self, turn: PendingTurn) -> None:
        """Attribute a captured turn's history, record its reply, queue it for the checks."""
        cap, reply = turn.capture, turn.reply
        assert cap is not None
        t0 = time.perf_counter()
        try:
            ctx = self._attributed(
                cap.messages, cap.requested_model, cap.conversation_id, cap.metadata, cap.started_at, t0
            )
        except Exception:
            _log.warning("handoffmon attribution failed; turn continues unattributed", exc_info=True)
            self.count_error("attribution")
            ctx = self._degraded(cap.messages, cap.requested_model, cap.metadata, None)
        if turn.describe is not None:
            turn.apply(self._described(turn.describe, turn.describe_args))
            turn.describe, turn.describe_args = None, ()
        canon = self._canonical(turn.authors)
        turn.ctx = ctx
        turn.recorded = self._record(ctx, reply, canon)
        turn.authors = canon
        turn.reply_text = reply_text(reply)
        turn.capture = turn.reply = None  # the history and reply objects are not needed any more
        self._queue(turn)

    # -- background ---------------------------------------------------------------------

    def _emit(self, result: Any) -> None:
        for d in self._dispatch:
            d.submit(result)

    def _observe(self, stage: str, seconds: float) -> None:
        for obs in self._observers:
            try:
                obs.observe_overhead(stage, seconds)
            except Exception:
                _log.debug("handoffmon observer failed", exc_info=True)

    def _count_drop(self) -> None:
        self.aggregates.count_dropped()
        for obs in self._observers:
            try:
                obs.count_drop(1)
            except Exception:
                _log.debug("handoffmon observer failed", exc_info=True)

    def _attribution_error(self, stage: str, exc: BaseException) -> None:
        _log.warning("handoffmon attribution failed open (%s): %r", stage, exc)
        self.count_error(stage)

    def _pipeline_error(self, exc: BaseException) -> None:
        _log.warning("handoffmon pipeline error: %r", exc)
        self.count_error("pipeline")

    def _flush_aggregates(self) -> None:
        try:
            self.aggregates.flush()
        except Exception:
            _log.warning("handoffmon could not persist aggregates", exc_info=True)
            self.count_error("aggregates")

    def count_error(self, stage: str, n: int = 1) -> None:
        """Count one of handoffmon's own failures (``monitor_errors{stage}``).

        Also pushed to every exporter that implements ``MonitorObserver``.
        """
        self.aggregates.count_error(stage, n)
        for obs in self._observers:
            try:
                for _ in range(n):
                    obs.count_error(stage)
            except Exception:
                _log.debug("handoffmon observer failed", exc_info=True)

    # -- control ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker threads (when built with ``start=False``)."""
        self._front.start()
        self._pool.start()

    def add_exporter(self, exporter: Exporter) -> None:
        """Send every turn finished from now on to ``exporter`` as well.

        An exporter that also implements ``MonitorObserver`` receives handoffmon's own
        errors, drops and stage overheads.
        """
        if isinstance(exporter, MonitorObserver):
            self._observers = (*self._observers, exporter)
        self._dispatch.append(
            ExporterDispatch(
                exporter, queue_size=self.config.pipeline.export_queue_size, on_error=self.count_error
            )
        )
        if hasattr(exporter, "publish_refit"):
            self._start_refit()

    def _start_refit(self) -> None:
        """Start the periodic refit once something can publish its gauges.

        Runs every ``refit.interval_s`` (0 disables it) on a daemon thread; without an
        exporter that publishes refits (Prometheus, OTel) there is nobody to hand the
        result to, so no thread is started.
        """
        if self._refit is not None or self._closed or self.config.refit.interval_s <= 0:
            return
        from handoffmon.refit.periodic import PeriodicRefit

        self._refit = PeriodicRefit.for_monitor(self)
        self._refit.start()

    @property
    def refit(self) -> PeriodicRefit | None:
        """The periodic refit (``None`` until an exporter that publishes refits is added)."""
        return self._refit

    @property
    def exporters(self) -> tuple[Exporter, ...]:
        """The registered exporters."""
        return tuple(d.exporter for d in self._dispatch)

    def snapshot(self) -> Counts:
        """All aggregate counters now (turns still queued are not in it yet; see :meth:`flush`)."""
        return self.aggregates.snapshot()

    @property
    def stats(self) -> dict[str, Any]:
        """Monitor health: errors by stage, dropped turns, turns queued or in progress, and
        ``attribution_overflows``: turns dropped because the attribution queue was full."""
        snap = self.aggregates.snapshot()
        return {
            "monitor_errors": dict(snap.monitor_errors),
            "dropped": snap.dropped,
            "pending": self._front.pending() + self._pool.pending(),
            "attribution_overflows": self.attribution_overflows,
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
        """Drain the queue, shut exporters down, persist aggregates, close the store. Idempotent.

        Args:
            timeout_s: overall budget; defaults to ``pipeline.shutdown_timeout_s``.
        """
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._atexit)
        if self._refit is not None:
            self._refit.stop()
        budget = self.config.pipeline.shutdown_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + budget
        front_ok = self._front.close(budget)  # drains into the pool
        if not (self._pool.close(max(0.0, deadline - time.monotonic())) and front_ok):
            _log.warning("handoffmon pipeline did not drain within %.1fs", budget)
            self.count_error("pipeline")
        for d in self._dispatch:
            d.close(max(0.0, deadline - time.monotonic()))
        self._close_storage()

    def _close_storage(self) -> None:
        try:
            self.aggregates.close()
        except Exception:
            _log.warning("handoffmon could not persist aggregates at close", exc_info=True)
            self.count_error("aggregates")
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
