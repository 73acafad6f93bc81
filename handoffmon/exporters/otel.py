"""OpenTelemetry exporter: evaluations as GenAI events in the caller's trace (or an own span); counters."""

from __future__ import annotations

import json
import math
import threading
import time
from collections import Counter as _Tally
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from opentelemetry import _logs, metrics, trace
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from handoffmon._extras import requires_extra
from handoffmon._version import __version__
from handoffmon.exporters.logs import MAX_ID_CHARS, clip, get_logger, log_error
from handoffmon.exporters.prometheus import (
    FALLBACK_LABELS,
    HISTORY_TOKEN_BUCKETS,
    OVERHEAD_BUCKETS,
    fallback_labels,
    method_label,
)
from handoffmon.exporters.refit_series import REFIT_GAUGES, Series, refit_series
from handoffmon.exporters.store_failures import EVICTIONS_HELP, OPERATIONS_HELP
from handoffmon.labels import (
    BASELINE_LABELS,
    CELL_STAT_LABELS,
    MAX_LABEL_CHARS,
    OTHER,
    SHADOW_PAIR_LABELS,
    LabelGuard,
    refit_input_labels,
)
from handoffmon.types import (
    ATTRIBUTION_METHODS,
    MONITOR_STAGES,
    NO_REPLY_STATUSES,
    UNKNOWN_MODEL,
    VERDICTS,
    CheckResult,
    TurnContent,
    TurnResult,
    check_error_reason,
)

if TYPE_CHECKING:  # pragma: no cover
    from opentelemetry.context import Context

    from handoffmon.config import HandoffmonConfig
    from handoffmon.counts import ShadowKey
    from handoffmon.refit.result import RefitResult

SCOPE = "handoffmon"
EVALUATION_EVENT = "gen_ai.evaluation.result"
"""The GenAI evaluation event (semantic conventions, development status): a log record, not a span event."""
TURN_EVENT = "handoffmon.turn"
"""handoffmon's own event per turn when it joins the caller's trace instead of adding a span."""

# GenAI semantic conventions (development status), spelled out: the Python semconv
# package marks these constants deprecated since they moved to their own repository.
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
CONVERSATION_ID = "gen_ai.conversation.id"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"
REQUEST_STREAM = "gen_ai.request.stream"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
EVAL_NAME = "gen_ai.evaluation.name"
EVAL_LABEL = "gen_ai.evaluation.score.label"
EVAL_VALUE = "gen_ai.evaluation.score.value"
EVAL_EXPLANATION = "gen_ai.evaluation.explanation"
ERROR_TYPE = "error.type"

PROVIDER_NAMES: Mapping[str, str] = {
    # LiteLLM provider ids → gen_ai.provider.name well-known values; others pass through
    # (openai, anthropic, cohere, groq, deepseek, perplexity are spelled alike). The
    # text-completion and _chat/_text ids are other endpoints of the same vendors
    # (``gpt-3.5-turbo-instruct`` resolves to ``text-completion-openai``).
    "text-completion-openai": "openai",
    "anthropic_text": "anthropic",
    "cohere_chat": "cohere",
    "bedrock": "aws.bedrock",
    "azure": "azure.ai.openai",
    "azure_text": "azure.ai.openai",
    "azure_ai": "azure.ai.inference",
    "vertex_ai": "gcp.vertex_ai",
    "vertex_ai_beta": "gcp.vertex_ai",
    "gemini": "gcp.gemini",
    "mistral": "mistral_ai",
    "codestral": "mistral_ai",
    "text-completion-codestral": "mistral_ai",
    "xai": "x_ai",
    "watsonx": "ibm.watsonx.ai",
    "watsonx_text": "ibm.watsonx.ai",
}


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def span_times(result: TurnResult, now: float | None = None) -> tuple[int, int]:
    """(start, end) in epoch ns: end = ``record.finished_at`` (or now), start = end − latency."""
    end = result.record.finished_at or (time.time() if now is None else now)
    return _ns(end - max(result.record.latency_s, 0.0)), _ns(end)


def span_attributes(result: TurnResult) -> dict[str, Any]:
    """GenAI + ``handoffmon.*`` attributes of a turn's span (no content; names cut by ``clip``)."""
    ctx, rec = result.context, result.record
    attrs: dict[str, Any] = {
        OPERATION: "chat",
        CONVERSATION_ID: clip(ctx.conversation_id, MAX_ID_CHARS),
        REQUEST_STREAM: rec.streamed,
        RESPONSE_MODEL: clip(rec.response_model or rec.author),
        "handoffmon.conversation_id_source": ctx.conversation_id_source,
        "handoffmon.depth": ctx.depth,
        "handoffmon.depth_bucket": result.depth_bucket,
        "handoffmon.author": clip(rec.author),
        "handoffmon.authors": [clip(a) for a in rec.authors],
        "handoffmon.prefix_model": clip(ctx.prefix_model),
        "handoffmon.prefix_purity": float(ctx.prefix_purity),
        "handoffmon.prefix_authors": ctx.prefix_authors,
        "handoffmon.handoff": LabelGuard.handoff(rec.handoff),
        "handoffmon.history_chars": ctx.history_chars,
        "handoffmon.history_tokens": ctx.history_tokens,
        "handoffmon.reply_chars": rec.reply_chars,
        "handoffmon.fallbacks": rec.fallbacks,
        "handoffmon.retries": rec.retries,
    }
    # how the earlier messages were attributed, counted by method: one list element per
    # message re-sent on every turn grew with the depth (O(depth²) per conversation)
    for method, n in sorted(_Tally(method_label(m) for m in result.attribution_methods).items()):
        attrs[f"handoffmon.attributions.{method}"] = n
    optional = {
        PROVIDER: clip(PROVIDER_NAMES.get(rec.provider, rec.provider)) if rec.provider else None,
        REQUEST_MODEL: clip(rec.requested_model or ctx.requested_model),
        INPUT_TOKENS: rec.input_tokens,
        OUTPUT_TOKENS: rec.output_tokens,
        FINISH_REASONS: [clip(rec.finish_reason)] if rec.finish_reason else None,
        "handoffmon.deployment_id": clip(rec.deployment_id),
        RESPONSE_ID: clip(rec.response_id, MAX_ID_CHARS),
    }
    attrs.update({k: v for k, v in optional.items() if v is not None})
    return attrs


MAX_CONTENT_BYTES = 64 * 1024
"""Budget of each captured content attribute, in UTF-8 bytes of its JSON. The history grows
with every turn and is captured again on each one; unbounded, one deep conversation made spans
of megabytes, and an OTLP exporter refuses a batch over its message limit (gRPC: 4 MiB) whole,
the application's own spans with it."""
CONTENT_TRUNCATED = "handoffmon.content_truncated"
INPUT_MESSAGES_DROPPED = "handoffmon.input_messages_dropped"


def _text_part(role: str, text: str) -> dict[str, Any]:
    # a role is whatever the client sent: cut like a name, so no role outgrows the budget
    return {"role": role[:MAX_LABEL_CHARS], "parts": [{"type": "text", "content": text}]}


def _cut(text: str, max_bytes: int) -> str:
    """The longest start of ``text`` whose JSON string fits ``max_bytes`` (whole characters)."""
    lo, hi = 0, min(len(text), max_bytes)  # a character takes at least one byte
    while lo < hi:  # JSON escaping makes the size of a prefix only monotonic: bisect it
        mid = (lo + hi + 1) // 2
        if len(json.dumps(text[:mid]).encode()) <= max_bytes:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


def _fit(message: dict[str, Any], text: str, max_bytes: int) -> tuple[dict[str, Any], bool]:
    """``message`` whose text part is cut so its JSON fits ``max_bytes``; whether it was cut."""
    if len(text) <= max_bytes and len(json.dumps(message).encode()) <= max_bytes:
        return message, False
    envelope = len(json.dumps(dict(message, parts=[{"type": "text", "content": ""}])).encode())
    room = max_bytes - envelope + 2  # the empty string's quotes are counted by _cut
    return dict(message, parts=[{"type": "text", "content": _cut(text, max(room, 2))}]), True


def content_attributes(
    content: TurnContent, finish_reason: str | None, max_bytes: int = MAX_CONTENT_BYTES
) -> dict[str, Any]:
    """``gen_ai.input.messages`` / ``gen_ai.output.messages`` as JSON (opt-in only).

    Each stays within ``max_bytes``: the oldest input messages are dropped first (their count
    in ``handoffmon.input_messages_dropped``), then the text of the newest one, or of the
    reply, is cut from its end (``handoffmon.content_truncated``). Only what is kept is encoded.
    """
    messages = content.input_messages
    output = _text_part("assistant", content.output_text)
    output["finish_reason"] = finish_reason or "stop"
    # JSON escapes a character into at most 6 bytes; a part's envelope is under 80 with its role
    bound = sum(6 * (len(m.content) + min(len(m.role), MAX_LABEL_CHARS)) + 80 for m in messages)
    if (
        bound <= max_bytes
        and 6 * (len(content.output_text) + len(output["finish_reason"])) + 100 <= max_bytes
    ):
        inputs = [_text_part(m.role, m.content) for m in messages]
        return {INPUT_MESSAGES: json.dumps(inputs), OUTPUT_MESSAGES: json.dumps([output])}
    kept: list[dict[str, Any]] = []
    cut_in, total = False, 2  # the list's brackets
    for m in reversed(messages):  # newest first: keep the longest recent run that fits
        if not kept:
            part, cut_in = _fit(_text_part(m.role, m.content), m.content, max_bytes - 2)
        elif len(m.content) > max_bytes:
            break
        else:
            part = _text_part(m.role, m.content)
        size = len(json.dumps(part).encode()) + (2 if kept else 0)  # ", " between items
        if kept and total + size > max_bytes:
            break
        kept.append(part)
        total += size
    kept.reverse()
    output, cut_out = _fit(output, content.output_text, max_bytes - 2)
    attrs: dict[str, Any] = {INPUT_MESSAGES: json.dumps(kept), OUTPUT_MESSAGES: json.dumps([output])}
    if len(kept) < len(messages):
        attrs[INPUT_MESSAGES_DROPPED] = len(messages) - len(kept)
    if cut_in or cut_out:
        attrs[CONTENT_TRUNCATED] = True
    return attrs


def error_type(reason: str | None) -> str:
    """``error.type`` of an ``error`` verdict, which the conventions want predictable and of low
    cardinality: the exception's class name of ``raised:<Class>``, handoffmon's own reasons
    (``over_budget``, ``too_large``, ``scope_error``, ... :data:`CHECK_ERROR_REASONS`), else
    the well-known ``_OTHER`` (a custom checker's free text stays in the explanation)."""
    head, _, tail = (reason or "").partition(":")
    if head == "raised" and tail.isidentifier():
        return tail
    category = check_error_reason(head)
    return head if head and category == head and head != "other" else "_OTHER"


def evaluation_attributes(
    check: CheckResult, previous: str | None, result: TurnResult | None = None
) -> dict[str, Any]:
    """Attributes of one ``gen_ai.evaluation.result`` event (score 1/0 for pass/fail only).

    With the turn's ``result``: ``gen_ai.response.id`` when the response carried one (so the
    event correlates with the caller's GenAI span even without a parent), and the turn's
    handoff context (depth, author, prefix model, handoff) to slice evaluations by.
    """
    attrs: dict[str, Any] = {
        EVAL_NAME: clip(check.rule),
        EVAL_LABEL: check.verdict,
        "handoffmon.evaluation.duration_s": float(check.duration_s),
    }
    if check.verdict in ("pass", "fail"):
        attrs[EVAL_VALUE] = 1.0 if check.verdict == "pass" else 0.0
    if check.reason:
        attrs[EVAL_EXPLANATION] = check.reason
    if check.verdict == "error":
        attrs[ERROR_TYPE] = error_type(check.reason)
    if previous is not None:
        attrs["handoffmon.evaluation.previous_label"] = previous
    if result is not None:
        rec, ctx = result.record, result.context
        if rec.response_id:
            attrs[RESPONSE_ID] = clip(rec.response_id, MAX_ID_CHARS)
        attrs[CONVERSATION_ID] = clip(ctx.conversation_id, MAX_ID_CHARS)
        attrs["handoffmon.depth"] = ctx.depth
        attrs["handoffmon.author"] = clip(rec.author)
        attrs["handoffmon.prefix_model"] = clip(ctx.prefix_model)
        attrs["handoffmon.handoff"] = LabelGuard.handoff(rec.handoff)
    return attrs


class _Sums:
    """A counter summed in memory on the check thread and read by an observable counter at
    each collection, the way the Prometheus exporter's counters are read at scrape time.

    One synchronous SDK measurement costs ~7 µs (the SDK builds a ``Measurement``, cleans and
    hashes its attributes and asks the exemplar filter, per call); a turn made ~13 of them.
    The counters with no exemplar worth having (refit inputs, checker time, errors by reason)
    are summed here instead: a dict add per series under the exporter's lock, which the
    callback takes too. Bounded like the SDK's own storage: the keys are capped label values.
    """

    __slots__ = ("_labels", "_lock", "values")

    def __init__(self, labels: tuple[str, ...], lock: threading.Lock) -> None:
        self._labels = labels
        self._lock = lock
        self.values: dict[tuple[str, ...], float] = {}
        """Label values (in ``labels`` order) → sum; add under the lock."""

    def add(self, key: tuple[str, ...], amount: float) -> None:
        """Add ``amount`` to ``key``'s sum (the caller holds the lock)."""
        values = self.values
        values[key] = values.get(key, 0) + amount

    def observe(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            items = list(self.values.items())
        labels = self._labels
        return [Observation(v, dict(zip(labels, key, strict=True))) for key, v in items]


class _CollectorSnapshot:
    """One ``collect()`` of a prometheus_client collector per OTel collection cycle, shared by
    the callbacks of its families (``observe_collector``).

    The SDK calls every observable instrument's callback once per cycle, one after the other:
    the first family asked reads the collector, the others are served from that reading, and
    a family asked again (the next cycle, or another reader's) reads it anew. So every family
    of one cycle comes from the same reading, as in a Prometheus scrape, and a collector of
    ten families is read once a cycle, not ten times. Values that are not finite (a budget's
    ``+Inf`` limit) are left out: OTLP points are finite, and the SDK would log a warning for
    each one at every cycle.
    """

    def __init__(self, collector: Any) -> None:
        self._collector = collector
        self._lock = threading.Lock()
        self._points: dict[str, list[Observation]] = {}
        self._served: set[str] = set()
        self._read = False

    def families(self) -> dict[str, tuple[str, str]]:
        """Name → (type, help) of every family the collector yields now."""
        return {f.name: (f.type, f.documentation) for f in self._collector.collect()}

    def callback(self, family: str, sample: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        """Callback reading the ``sample`` values of ``family``."""

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            with self._lock:
                if not self._read or family in self._served:
                    self._read = False  # a collect() that raises is retried by the next family
                    self._points = self._take()
                    self._served = set()
                    self._read = True
                self._served.add(family)
                return self._points.get(sample, [])

        return observe

    def _take(self) -> dict[str, list[Observation]]:
        points: dict[str, list[Observation]] = {}
        for f in self._collector.collect():
            for s in f.samples:
                if math.isfinite(s.value):
                    points.setdefault(s.name, []).append(Observation(s.value, dict(s.labels)))
        return points


def _require_sdk(feature: str, *providers: Any) -> None:
    """With no provider passed, the API's global ones are used, which stay no-ops unless an
    SDK is installed: without the ``otel`` extra, say so now (MissingExtraError naming
    ``feature``) instead of exporting into the void."""
    if any(p is not None for p in providers):
        return
    with requires_extra("otel", feature):
        import opentelemetry.sdk  # noqa: F401


def _sampled_out(context: Context | None) -> bool:
    """Whether ``context`` holds a valid span context whose trace was not sampled."""
    if context is None:
        return False
    span_context = trace.get_current_span(context).get_span_context()
    return span_context.is_valid and not span_context.trace_flags.sampled


_PROPAGATOR = TraceContextTextMapPropagator()


def _parent(result: TurnResult) -> Context | None:
    """The caller's span context captured with the request (its ``traceparent``), if any."""
    traceparent = result.context.metadata.get("traceparent")
    if not isinstance(traceparent, str):
        return None
    return _PROPAGATOR.extract({"traceparent": traceparent})


class _Preset(threading.local):
    """The own span the current thread is about to start: its ids and sampling decision."""

    plan: _Plan | None = None


_PRESET = _Preset()
"""One for the process: the wrappers of a provider's handoffmon tracer serve every exporter on it."""


def _turn_key(result: TurnResult) -> tuple[str, int, float | None]:
    """What tells a turn from another whose object took the same ``id()`` after it was freed
    (a plan holds no reference to its turn, which may carry captured content)."""
    return (result.context.conversation_id, result.context.depth, result.record.finished_at)


class _Plan:
    """An own span decided at counting time: its context (ids, sampled flag) and the sampler's
    result, for the events thread to start it with."""

    __slots__ = ("context", "sampling", "turn")

    def __init__(self, result: TurnResult, context: trace.SpanContext, sampling: Any) -> None:
        self.turn = _turn_key(result)
        self.context = context
        self.sampling = sampling


class _PresetIds:
    """The tracer's id generator, handing out the preset span's ids on the thread starting it."""

    def __init__(self, inner: Any, preset: _Preset) -> None:
        self.inner, self._preset = inner, preset

    def generate_trace_id(self) -> int:
        plan = self._preset.plan
        return self.inner.generate_trace_id() if plan is None else plan.context.trace_id

    def generate_span_id(self) -> int:
        plan = self._preset.plan
        return self.inner.generate_span_id() if plan is None else plan.context.span_id

    def is_trace_id_random(self) -> bool:
        return bool(self.inner.is_trace_id_random())


class _PresetSampler:
    """The tracer's sampler, answering with the decision already taken for the preset span (so
    the application's sampler is asked once per span, at counting time)."""

    def __init__(self, inner: Any, preset: _Preset) -> None:
        self.inner, self._preset = inner, preset

    def should_sample(
        self,
        parent_context: Any,
        trace_id: int,
        name: str,
        kind: Any = None,
        attributes: Any = None,
        links: Any = None,
        trace_state: Any = None,
    ) -> Any:
        plan = self._preset.plan
        if plan is None:
            return self.inner.should_sample(
                parent_context, trace_id, name, kind, attributes, links, trace_state
            )
        from opentelemetry.sdk.trace.sampling import SamplingResult

        # the span's attributes reach it through the result; the sampler's own ones win
        decided = plan.sampling
        merged = {**(attributes or {}), **(decided.attributes or {})}
        return SamplingResult(decided.decision, merged, decided.trace_state)

    def get_description(self) -> str:
        return str(self.inner.get_description())


MAX_PLANNED = 16_384
"""Own spans decided by the counting and not yet started by the events thread (or the other
way round), at most (a few hundred bytes each, no reference to the turn): a turn the events'
full queue refused leaves its plan behind, dropped oldest first past this. Above the default
``pipeline.export_queue_size`` (10,000), so a queued turn's plan is still there when its span
is started; past it, that span gets new ids and its counts' exemplars point at none."""


class _OwnSpans:
    """The own span's ids decided when the turn is counted, so its counts carry exemplars.

    The counting runs inline on the check thread, before the span exists (the events thread
    starts it later, or meanwhile). So the span is planned at counting time: its trace id (the
    parent's, or a new one) and span id from the application's tracer's id generator, and its
    sampling decision from the tracer's sampler (asked once: with the span's name, kind and
    parent, but not its attributes, which are built on the events thread). The counting records
    in that span context; the events thread starts the span with the same ids and decision.

    The OpenTelemetry SDK has no API to start a span with given ids. Its ``Tracer`` takes them
    from its public ``id_generator`` and ``sampler`` attributes, which this wraps once (on the
    tracer of handoffmon's scope only) with versions that answer the plan on the thread
    starting the planned span and delegate everywhere else. Should a later SDK stop using them,
    the first span whose ids differ from its plan turns this off (logged once): turns are then
    counted in their captured ``traceparent`` only, without an own span's exemplar.
    """

    def __init__(self, tracer_provider: Any, log: Any) -> None:
        self._given = tracer_provider
        self._provider: Any = None
        self._tracer: Any = None
        self._ids: Any = None
        """The application's id generator and sampler, which the tracer's wrappers delegate to."""
        self._sampler: Any = None
        self._preset = _PRESET
        self._plans: dict[int, _Plan] = {}
        self._lock = threading.Lock()
        self._log = log
        self.enabled = True

    def _sdk_tracer(self) -> Any:
        """handoffmon's tracer of the current provider with the preset wrappers, or None when
        it is not the SDK's (no provider set yet: the API's proxy; another implementation)."""
        provider = self._given if self._given is not None else trace.get_tracer_provider()
        if provider is not self._provider:
            tracer: Any = provider.get_tracer(SCOPE, __version__)
            ids, sampler = getattr(tracer, "id_generator", None), getattr(tracer, "sampler", None)
            if ids is None or sampler is None or not callable(getattr(tracer, "start_span", None)):
                tracer = None
            else:
                # one tracer per scope and provider (the SDK caches it): wrap it once
                if not isinstance(ids, _PresetIds):
                    ids = tracer.id_generator = _PresetIds(ids, self._preset)
                if not isinstance(sampler, _PresetSampler):
                    sampler = tracer.sampler = _PresetSampler(sampler, self._preset)
                self._ids, self._sampler = ids.inner, sampler.inner
            self._provider, self._tracer = provider, tracer
        return self._tracer

    def plan(self, result: TurnResult, parent: Context | None, name: str) -> _Plan | None:
        """The turn's own span: planned by whichever of the counting and the events thread asks
        first, and forgotten once both have (all under the lock, so both get the same)."""
        if not self.enabled:
            return None
        key = id(result)
        with self._lock:
            plan = self._plans.pop(key, None)
            if plan is not None and plan.turn == _turn_key(result):
                return plan
            tracer = self._sdk_tracer()
            if tracer is None:
                return None
            parent_context = trace.get_current_span(parent).get_span_context()
            ids = self._ids
            trace_id = parent_context.trace_id if parent_context.is_valid else ids.generate_trace_id()
            sampling = self._sampler.should_sample(parent, trace_id, name, SpanKind.CLIENT, None, ())
            flags = trace.TraceFlags(
                trace.TraceFlags.SAMPLED if sampling.decision.is_sampled() else trace.TraceFlags.DEFAULT
            )
            context = trace.SpanContext(trace_id, ids.generate_span_id(), is_remote=False, trace_flags=flags)
            plan = self._plans[key] = _Plan(result, context, sampling)
            while len(self._plans) > MAX_PLANNED:
                del self._plans[next(iter(self._plans))]
            return plan

    def start(
        self, result: TurnResult, parent: Context | None, name: str, **kwargs: Any
    ) -> trace.Span | None:
        """Start the turn's planned own span on this thread; None when none is planned."""
        plan = self.plan(result, parent, name)
        tracer = self._tracer
        if plan is None or tracer is None:
            return None
        self._preset.plan = plan
        try:
            span: trace.Span = tracer.start_span(name, context=parent, kind=SpanKind.CLIENT, **kwargs)
        finally:
            self._preset.plan = None
        got = span.get_span_context()
        if (got.trace_id, got.span_id) != (plan.context.trace_id, plan.context.span_id):
            self.enabled = False
            self._log.warning(
                "own_span_ids_not_preset",
                stage="export_otel",
                reason="the SDK did not start the own span with the ids its counts were recorded "
                "with; own spans' exemplars are off",
            )
        return span


class OTelEvents:
    """The turn's events (and own span): :attr:`OTelExporter.events`, an exporter of its own.

    Apart from the counting so that the pipeline runs it on a thread and queue of its own
    (``export_inline`` unset): an application's span or log pipeline that blocks (a
    ``SimpleSpanProcessor`` exporting to a collector that does not answer) holds only this
    thread, and the turns its full queue refuses, like those whose events raised, are each one
    ``monitor_errors{stage="export"}``, while :class:`OTelExporter` has counted them all.
    ``force_flush`` is the :class:`OTelExporter`'s, which closes after it (``build_exporters``
    lists this one first), so what is emitted here while draining is flushed too.
    """

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None,
        logger_provider: Any,
        guard: LabelGuard,
        capture_content: bool,
        own_span: bool,
    ) -> None:
        self.guard = guard
        self._capture = capture_content
        self._own_span = own_span
        self._tracer = trace.get_tracer(SCOPE, __version__, tracer_provider=tracer_provider)
        self._events = _logs.get_logger(SCOPE, __version__, logger_provider=logger_provider)
        self._log = get_logger("handoffmon.exporters", exporter="otel_events")
        self._own = _OwnSpans(tracer_provider, self._log)

    def count_context(self, result: TurnResult) -> Context | None:
        """The context to count ``result`` in: its own span's (planned now, started later by
        :meth:`export`) in ``own`` mode, else its captured ``traceparent``'s. Never raises."""
        parent = _parent(result)
        if not self._own_span:
            return parent
        try:
            plan = self._own.plan(result, parent, self._span_name(result))
        except Exception as exc:
            log_error(self._log, "export_failed", "export_otel", exc)
            return parent
        if plan is None:
            return parent
        return trace.set_span_in_context(trace.NonRecordingSpan(plan.context))

    def _span_name(self, result: TurnResult) -> str:
        """``chat {request_model}``: span names must stay few (backends index them) while the
        requested model is whatever a client sent, so past the requested_model cap just ``chat``."""
        requested = result.record.requested_model or result.context.requested_model
        request_model = self.guard.requested_model(clip(requested) if requested else None)
        return f"chat {request_model}" if request_model not in (OTHER, UNKNOWN_MODEL) else "chat"

    def export(self, result: TurnResult) -> bool:
        """Emit the turn's events (and own span); False (and logged) when the pipeline refused them."""
        try:
            parent = _parent(result)
            if self._own_span:
                parent = self._span(result, parent)
            # when the trace was not sampled (the caller's, or the own span the sampler
            # dropped), events would be orphans of a trace no backend keeps
            if not _sampled_out(parent):
                self._events_of(result, parent)
        except Exception as exc:
            log_error(self._log, "export_failed", "export_otel", exc)
            return False
        return True

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Nothing of its own to flush: :meth:`OTelExporter.force_flush` flushes the providers."""
        return True

    def shutdown(self) -> None:
        """Nothing to release: the providers belong to the application."""

    def _events_of(self, result: TurnResult, parent: Context | None) -> None:
        """The turn's ``handoffmon.turn`` event (join mode) and one evaluation event per check."""
        end = span_times(result)[1]
        if not self._own_span:
            self._emit(TURN_EVENT, span_attributes(result), parent, end)
        previous = {t.rule: t.from_verdict for t in result.transitions}
        for check in result.checks:
            attrs = evaluation_attributes(check, previous.get(check.rule), result)
            self._emit(EVALUATION_EVENT, attrs, parent, end)

    def _span(self, result: TurnResult, parent: Context | None) -> Context:
        """The own ``chat`` span, ended; returns its context for the evaluation events."""
        start, end = span_times(result)
        attrs = span_attributes(result)
        if self._capture and result.content is not None:
            attrs.update(content_attributes(result.content, result.record.finish_reason))
        name = self._span_name(result)
        # with the ids and sampling decision the turn was counted with (its exemplars)
        span = self._own.start(result, parent, name, attributes=attrs, start_time=start)
        if span is None:
            span = self._tracer.start_span(
                name, context=parent, kind=SpanKind.CLIENT, attributes=attrs, start_time=start
            )
        span.end(end_time=end)
        return trace.set_span_in_context(span)

    def _emit(
        self, name: str, attributes: dict[str, Any], context: Context | None, timestamp_ns: int
    ) -> None:
        # a LogRecord rather than emit(**fields): the keyword form is newer than the record's
        # event_name and context (opentelemetry-api >= 1.35)
        record = LogRecord(
            timestamp=timestamp_ns,
            context=context,
            severity_number=SeverityNumber.INFO,
            attributes=attributes,
            event_name=name,
        )
        self._events.emit(record)


class OTelExporter:
    """Exports each turn and handoffmon's counters through OpenTelemetry, the way GenAI stacks run it.

    ``span="join"`` (default, for stacks that already trace the LLM call — LiteLLM's OTel
    callback, OpenLLMetry, the OpenAI instrumentor): no span of its own. Each verdict is a
    ``gen_ai.evaluation.result`` event and the turn's attributes a ``handoffmon.turn``
    event, both log records through the OTel logs API (span events are being deprecated),
    parented to the caller's span captured with the request (its ``traceparent``: the
    current span, the ``traceparent`` header, or LiteLLM's parent span) and carrying
    ``gen_ai.response.id`` when the response had one, which is how a backend joins them to
    the caller's GenAI span when no parent was captured. When the parent span was not
    sampled (its ``traceparent`` flags say so, or the own span's sampler dropped it) the
    turn's events are skipped, like the spans of that trace; the metrics still count it.

    Two exporters for the pipeline: this one counts (:meth:`export`, inline), and
    :attr:`events` emits the events and own span on a thread of its own, so the counting
    never waits on span delivery; a ``Monitor`` given this exporter registers both
    (:attr:`companions`). Each turn is counted in its captured ``traceparent``'s context, or
    in ``own`` mode its own span's (planned when counted, started later with those ids:
    :class:`_OwnSpans`), so sampled turns carry exemplars of that trace.

    ``span="own"`` (stacks with no GenAI instrumentation): one CLIENT span per turn,
    ``chat {request_model}``, with the GenAI and ``handoffmon.*`` attributes, dated from
    the turn's finish time and latency and parented to the same ``traceparent``; the
    evaluation events are parented to it. Message text only with ``capture_content=True``
    and only on that span.

    Instruments carry the Prometheus names without ``_total`` (``handoffmon_turns``,
    ``handoffmon_checks``, ...) and the same bounded attributes; the per-turn counters
    without exemplars are observable counters summed in memory (:class:`_Sums`); refit gauges
    are observable gauges of the last ``publish_refit``. Implements ``MonitorObserver``.

    Args:
        tracer_provider: the application's provider; None = the OTel API's current
            global one (this class never installs a provider).
        meter_provider: likewise for metrics.
        logger_provider: likewise for the events (the OTel logs API).
        guard: label guard for metric attributes (share the Prometheus exporter's).
        capture_content: opt in to message text on own spans.
        span: ``join`` the caller's trace, or emit an ``own`` span per turn.
    """

    export_inline = True
    """Counting is in-memory work on the SDK's instruments: the pipeline calls :meth:`export`
    on its check thread, as it does the Prometheus exporter's. The events and own span, which
    an application's processor may make wait on a collector, are :attr:`events`' work."""

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        logger_provider: Any = None,
        guard: LabelGuard | None = None,
        capture_content: bool = False,
        span: Literal["join", "own"] = "join",
    ) -> None:
        _require_sdk("OTelExporter with no provider passed", tracer_provider, meter_provider, logger_provider)
        self.guard = guard or LabelGuard()
        self._own_span = span == "own"
        # None = the global one, looked up again at each flush: before the application sets
        # its SDK the API hands out proxies, which forward to the SDK once it is set but have
        # no force_flush of their own
        self._providers = (tracer_provider, meter_provider, logger_provider)
        self.events = OTelEvents(
            tracer_provider=tracer_provider,
            logger_provider=logger_provider,
            guard=self.guard,
            capture_content=capture_content,
            own_span=self._own_span,
        )
        """The turn's events and own span, a second exporter (``Monitor.add_exporter`` adds it)."""
        meter = metrics.get_meter(SCOPE, __version__, meter_provider=meter_provider)
        self._meter = meter
        self._store_stats: Callable[[], dict[str, int]] | None = None
        self._store_counts: dict[str, Callable[[], dict[str, int]] | None] = {}
        """The store's counts by one label (``op`` → calls, ``what`` → evictions), once wired."""
        self._instruments(meter)
        self._verdict_cells: set[tuple[str, str, str, str]] = set()
        self._cells_lock = threading.Lock()
        self._init_known_series()
        self._refit: dict[str, Series] = {}
        self._refit_lock = threading.Lock()
        self._log = get_logger("handoffmon.exporters", exporter="otel")
        if capture_content and not self._own_span:
            # an opt-in that silently did nothing would read as "no text is captured" or be
            # debugged as a pipeline fault: say once that join mode never carries text
            self._log.warning(
                "capture_content_ignored",
                stage="export_otel",
                reason="message text goes on own spans only; telemetry.otel_span is join",
            )

    @property
    def companions(self) -> tuple[OTelEvents]:
        """:attr:`events`: ``Monitor.add_exporter`` registers it with this exporter (before it,
        once), so a monitor given only the counting still emits the spans and events."""
        return (self.events,)

    @classmethod
    def from_config(
        cls,
        config: HandoffmonConfig,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        logger_provider: Any = None,
        guard: LabelGuard | None = None,
    ) -> OTelExporter:
        """Build from ``telemetry.otel_span``, ``telemetry.capture_content`` and the label caps.

        Raises:
            MissingExtraError: no provider passed and the OpenTelemetry SDK (the ``otel``
                extra) is not installed, naming ``telemetry.otel`` and the config's source.
        """
        _require_sdk(f"telemetry.otel ({config.source})", tracer_provider, meter_provider, logger_provider)
        return cls(
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            logger_provider=logger_provider,
            guard=guard or LabelGuard.from_config(config),
            capture_content=config.telemetry.capture_content,
            span=config.telemetry.otel_span,
        )

    def _sums(
        self, meter: metrics.Meter, name: str, unit: str, description: str, labels: tuple[str, ...]
    ) -> _Sums:
        """A counter summed in memory (:class:`_Sums`), as an observable counter of ``meter``."""
        sums = _Sums(labels, self._sums_lock)
        meter.create_observable_counter(name, callbacks=[sums.observe], unit=unit, description=description)
        return sums

    def _instruments(self, meter: metrics.Meter) -> None:
        c = meter.create_counter
        self._turns = c(
            "handoffmon_turns", "{turn}", "Assistant turns by author, prefix model, depth bucket."
        )
        self._checks = c("handoffmon_checks", "{check}", "Rule verdicts on turns.")
        # summed here, read at each collection (_Sums): no exemplars, a dict add per turn
        self._sums_lock = threading.Lock()
        sums = self._sums
        self._check_seconds = sums(
            meter, "handoffmon_check_seconds", "s", "Time spent in each rule's checker.", ("rule",)
        )
        self._check_errors = sums(
            meter,
            "handoffmon_check_errors",
            "{check}",
            "Error verdicts by rule and reason (limits and failures).",
            ("rule", "reason"),
        )
        self._transitions = sums(
            meter,
            "handoffmon_rule_transitions",
            "{transition}",
            "Consecutive verdicts of a rule.",
            ("rule", "model", "handoff", "from_verdict", "to_verdict"),
        )
        self._baseline_checks = sums(
            meter,
            "handoffmon_baseline_checks",
            "{check}",
            "Rule verdicts on clean same-author turns.",
            BASELINE_LABELS,
        )
        self._cell_stats = sums(
            meter,
            "handoffmon_cell_stats",
            "1",
            "Per-cell depth and conversation-cluster sums (refit input).",
            CELL_STAT_LABELS,
        )
        self._attributions = sums(
            meter,
            "handoffmon_attributions",
            "{message}",
            "Earlier messages attributed, by method.",
            ("method",),
        )
        self._fallbacks = sums(
            meter, "handoffmon_fallbacks", "{fallback}", "Router fallbacks before the reply.", FALLBACK_LABELS
        )
        self._shadow_pair_stats = c(
            "handoffmon_shadow_pair_stats", "1", "Shadow pairs' paired tables and cluster sums (refit input)."
        )
        self._errors = c("handoffmon_monitor_errors", "{error}", "handoffmon's own failures, by stage.")
        self._dropped = c(
            "handoffmon_queue_dropped",
            "{turn}",
            "Turns dropped unrecorded: a queue or the byte budget was full, or lost at shutdown.",
        )
        self._no_reply = c(
            "handoffmon_responses_without_reply",
            "{response}",
            "Answers of every API (Chat Completions, Responses, Messages) that finished without a reply "
            "(no turn), by status.",
        )
        self._overhead = meter.create_histogram(
            "handoffmon_overhead_seconds",
            "s",
            "Time handoffmon spent per turn, by stage.",
            explicit_bucket_boundaries_advisory=list(OVERHEAD_BUCKETS),
        )
        self._history_tokens = meter.create_histogram(
            "handoffmon_history_tokens",
            "{token}",
            "Approximate request history size in tokens, by depth bucket.",
            explicit_bucket_boundaries_advisory=list(HISTORY_TOKEN_BUCKETS),
        )
        meter.create_observable_gauge(
            "handoffmon_label_values",
            callbacks=[self._observe_usage(0)],
            unit="{value}",
            description="Distinct values admitted per capped label.",
        )
        meter.create_observable_gauge(
            "handoffmon_label_limit",
            callbacks=[self._observe_usage(1)],
            unit="{value}",
            description="Cap per label; values beyond it are exported as 'other'.",
        )
        meter.create_observable_gauge(
            "handoffmon_build_info",
            callbacks=[lambda options: [Observation(1, {"version": __version__})]],
            # no unit: "1" on a gauge makes OTel → Prometheus translators name it *_ratio
            description="Always 1; the handoffmon version as a label.",
        )
        meter.create_observable_counter(
            "handoffmon_label_overflows",
            callbacks=[self._observe_overflows],
            unit="{name}",
            description=(
                "Distinct names mapped to 'other' because a label cap was reached, by label "
                "(each counted once per process)."
            ),
        )
        meter.create_observable_counter(
            "handoffmon_store_failures",
            callbacks=[self._observe_store],
            unit="{operation}",
            description=(
                "Attribution store operations that failed or were skipped (fail-open), by op and kind."
            ),
        )
        meter.create_observable_counter(
            "handoffmon_store_operations",
            callbacks=[self._counts_by("op")],
            unit="{operation}",
            description=OPERATIONS_HELP,
        )
        meter.create_observable_counter(
            "handoffmon_store_evictions",
            callbacks=[self._counts_by("what")],
            unit="{item}",
            description=EVICTIONS_HELP,
        )
        for spec in REFIT_GAUGES:
            meter.create_observable_gauge(
                spec.name, callbacks=[self._refit_callback(spec.name, spec.labels)], description=spec.help
            )

    def _init_known_series(self) -> None:
        """Series whose attributes are known up front start at 0, as the Prometheus exporter's
        do: a counter's first point is otherwise its first failure, and ``increase()`` over a
        series that appears at 1 is 0, so the first monitoring error or drop would never alert."""
        for stage in MONITOR_STAGES:
            self._errors.add(0, {"stage": self.guard.stage(stage)})
        with self._sums_lock:
            for method in ATTRIBUTION_METHODS:
                self._attributions.add((method,), 0)
        self._dropped.add(0)
        for status in NO_REPLY_STATUSES:
            self._no_reply.add(0, {"status": status})

    def observe_store(
        self,
        stats: Callable[[], dict[str, int]],
        evictions: Callable[[], dict[str, int]] | None = None,
        operations: Callable[[], dict[str, int]] | None = None,
    ) -> None:
        """Report ``stats()`` (``{op}_{kind}`` → count, a store's ``stats``) as
        ``handoffmon_store_failures{op, kind}``, ``operations()`` (``op`` → calls, the store
        guard's) as ``handoffmon_store_operations{op}``, and ``evictions()`` (``what`` → count,
        the memory store's) as ``handoffmon_store_evictions{what}``, at each collection (the
        runtime wires it)."""
        self._store_stats = stats
        self._store_counts = {"what": evictions, "op": operations}

    def observe_collector(self, collector: Any) -> None:
        """Mirror a prometheus_client collector the runtime reads at scrape time (routing
        decisions and table age, shadow calls and budgets) as instruments read at each
        collection, with its names and labels: its counters as observable counters (the
        name without ``_total``), its gauges as observable gauges, including those it yields
        only later (``file_gauges``: the routing table's age once a table is published)."""
        snapshot = _CollectorSnapshot(collector)
        families = snapshot.families()
        for name in getattr(collector, "file_gauges", {}):
            families.setdefault(name, ("gauge", ""))
        for name, (kind, help_text) in families.items():
            if kind == "counter":
                observe = snapshot.callback(name, f"{name}_total")
                self._meter.create_observable_counter(name, callbacks=[observe], description=help_text)
            elif kind == "gauge":
                observe = snapshot.callback(name, name)
                self._meter.create_observable_gauge(name, callbacks=[observe], description=help_text)

    def _observe_overflows(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(n, {"label": label}) for label, n in sorted(self.guard.overflows().items())]

    def _observe_usage(self, i: int) -> Callable[[CallbackOptions], Iterable[Observation]]:
        """Callback of ``handoffmon_label_values`` (``i`` 0) or ``handoffmon_label_limit`` (1)."""

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(v[i], {"label": label}) for label, v in sorted(self.guard.usage().items())]

        return observe

    def _counts_by(self, label: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        """Callback of the store's counts keyed by ``label`` (``observe_store`` wires them)."""

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            read = self._store_counts.get(label)
            return [] if read is None else [Observation(n, {label: k}) for k, n in sorted(read().items())]

        return observe

    def _observe_store(self, options: CallbackOptions) -> Iterable[Observation]:
        stats = self._store_stats
        if stats is None:
            return []
        out = []
        for name, value in sorted(stats().items()):
            op, _, kind = name.rpartition("_")
            out.append(Observation(value, {"op": op, "kind": kind}))
        return out

    def _refit_callback(self, name: str, labels: tuple[str, ...]) -> Any:
        """Callback of one refit gauge. A value that is not finite (the half-life of an
        adherence that does not decay, ``+Inf`` in Prometheus) is left out: OTLP points are
        finite, and the SDK would drop it with a warning at every collection."""

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            series = self._refit.get(name, {})
            return [
                Observation(v, dict(zip(labels, key, strict=True)))
                for key, v in series.items()
                if math.isfinite(v)
            ]

        return observe

    # -- Exporter ---------------------------------------------------------------------

    def export(self, result: TurnResult) -> bool:
        """Count the turn (in memory: the SDK's instruments); False (and logged) on failure.

        Only the counting: the turn's events and own span are :attr:`events`' work, on a
        thread of their own, so a span pipeline that is slow or fails (a synchronous
        ``SimpleSpanProcessor`` waiting on a collector) never holds or loses a count.
        """
        try:
            self._count(result, self.events.count_context(result))
        except Exception as exc:
            log_error(self._log, "export_failed", "export_otel", exc)
            return False
        return True

    def _count(self, result: TurnResult, trace_context: Context | None) -> None:
        """Count the turn. The turns, checks and history-size measurements are the SDK's, each
        recorded in the turn's ``trace_context``: this runs on a worker thread, where no span is
        current, and the SDK's trace-based exemplar filter links a point to the request's trace
        only through the context it is recorded in. The other counters are summed in memory
        (:class:`_Sums`, read at each collection), one lock for the turn."""
        g, ctx, rec, tc = self.guard, result.context, result.record, trace_context
        model, prefix = g.model(rec.author), g.model(ctx.prefix_model)
        bucket = g.depth_bucket(result.depth_bucket, ctx.depth)
        self._turns.add(1, {"model": model, "prefix_model": prefix, "depth_bucket": bucket}, tc)
        checks = []
        for check in result.checks:
            rule = g.rule(check.rule)
            self._init_verdicts((rule, model, prefix, bucket))
            verdict = g.verdict(check.verdict)
            self._checks.add(
                1,
                {
                    "rule": rule,
                    "model": model,
                    "prefix_model": prefix,
                    "depth_bucket": bucket,
                    "verdict": verdict,
                },
                tc,
            )
            checks.append((rule, verdict, check))
        self._history_tokens.record(ctx.history_tokens, {"depth_bucket": bucket}, tc)
        handoff = g.handoff(rec.handoff)
        transitions = [
            (g.rule(tr.rule), model, handoff, g.verdict(tr.from_verdict), g.verdict(tr.to_verdict))
            for tr in result.transitions
        ]
        baseline, stats = refit_input_labels(result, g)
        methods = (
            _Tally(method_label(m) for m in result.attribution_methods) if result.attribution_methods else {}
        )
        fallbacks = fallback_labels(result, g, model) if rec.fallbacks > 0 else None
        with self._sums_lock:
            for rule, verdict, check in checks:
                self._check_seconds.add((rule,), max(check.duration_s, 0.0))
                if verdict == "error":
                    self._check_errors.add((rule, check_error_reason(check.reason)), 1)
            for transition in transitions:
                self._transitions.add(transition, 1)
            for labels in baseline:
                self._baseline_checks.add(labels, 1)
            for cell, v in stats:
                self._cell_stats.add(cell, v)
            for method, n in methods.items():
                self._attributions.add((method,), n)
            if fallbacks is not None:
                self._fallbacks.add(fallbacks, rec.fallbacks)

    def _init_verdicts(self, cell: tuple[str, str, str, str]) -> None:
        """Every verdict of a new (rule, model, prefix, bucket) cell at 0, as in Prometheus, so
        a fail ratio reads 0 rather than no data, and its first failure counts in ``increase()``.
        Bounded: the guard caps the four attributes. No trace context: a zero is no exemplar."""
        if cell in self._verdict_cells:
            return
        with self._cells_lock:
            if cell in self._verdict_cells:
                return
            self._verdict_cells.add(cell)
        rule, model, prefix, bucket = cell
        for verdict in VERDICTS:
            labels = {"rule": rule, "model": model, "prefix_model": prefix, "depth_bucket": bucket}
            self._checks.add(0, {**labels, "verdict": verdict})

    def count_shadow(self, increments: Mapping[ShadowKey, int]) -> None:
        """Add a shadow pair's increments to ``handoffmon_shadow_pair_stats``; never raises."""
        try:
            for key, n in increments.items():
                self._shadow_pair_stats.add(n, dict(zip(SHADOW_PAIR_LABELS, key, strict=True)))
        except Exception as exc:
            log_error(self._log, "observe_failed", "export_otel", exc)

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Flush the providers' span/log processors and metric readers (the Monitor calls this at close).

        One deadline, ``timeout_s`` from now, for all three: each provider flushes on a daemon
        thread of its own, all at once, and this returns when they are done or the deadline
        passes, whichever is first. (The SDK does not always honour the timeout it is given:
        a batch span processor or a metric reader exporting to a stalled OTLP endpoint blocks
        for the exporter's own timeout.) A flush still running at the deadline is abandoned
        and reported as failed (False), like one that raised or returned False. Providers
        without ``force_flush`` (the API's no-op and proxy ones) count as flushed. Providers
        not passed in are the global ones at the time of the flush, so an SDK the
        application set up after building handoffmon is flushed too.
        """
        deadline = time.monotonic() + max(timeout_s, 0.0)
        millis = int(max(timeout_s, 0.0) * 1000)
        results: list[bool] = []
        threads = []
        given_tracer, given_meter, given_logger = self._providers
        providers = (
            given_tracer or trace.get_tracer_provider(),
            given_meter or metrics.get_meter_provider(),
            given_logger or _logs.get_logger_provider(),
        )
        for provider in providers:
            flush = getattr(provider, "force_flush", None)
            if flush is None:
                continue

            def run(flush: Callable[[int], Any] = flush) -> None:
                try:
                    results.append(flush(millis) is not False)
                except Exception as exc:
                    log_error(self._log, "flush_failed", "export_otel", exc)
                    results.append(False)

            thread = threading.Thread(target=run, name="handoffmon-otel-flush", daemon=True)
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in threads):
            self._log.warning("flush_timeout", stage="export_otel", timeout_s=timeout_s)
            return False
        return all(results)

    def shutdown(self) -> None:
        """Nothing to release: the providers belong to the application (never shut down here)."""

    # -- MonitorObserver ----------------------------------------------------------------

    def observe_overhead(self, stage: str, seconds: float) -> None:
        """Record into ``handoffmon_overhead_seconds{stage}``; never raises."""
        try:
            self._overhead.record(max(seconds, 0.0), {"stage": self.guard.stage(stage)})
        except Exception as exc:
            log_error(self._log, "observe_failed", "export_otel", exc)

    def count_error(self, stage: str) -> None:
        """Add 1 to ``handoffmon_monitor_errors{stage}``; never raises."""
        try:
            self._errors.add(1, {"stage": self.guard.stage(stage)})
        except Exception as exc:
            log_error(self._log, "observe_failed", "export_otel", exc)

    def count_drop(self, n: int = 1) -> None:
        """Add ``n`` to ``handoffmon_queue_dropped``; never raises."""
        try:
            self._dropped.add(n)
        except Exception as exc:
            log_error(self._log, "observe_failed", "export_otel", exc)

    def count_no_reply(self, status: str) -> None:
        """Add 1 to ``handoffmon_responses_without_reply{status}``; never raises."""
        try:
            self._no_reply.add(1, {"status": status if status in NO_REPLY_STATUSES else "other"})
        except Exception as exc:
            log_error(self._log, "observe_failed", "export_otel", exc)

    def publish_refit(self, result: RefitResult) -> bool:
        """Make the refit gauges report ``result`` from the next collection on."""
        try:
            series = refit_series(result, self.guard)
            with self._refit_lock:
                self._refit = series
            return True
        except Exception as exc:
            log_error(self._log, "publish_refit_failed", "refit_publish", exc)
            return False
