"""The attribution stage: one thread turns ``Finished`` replies into ``Attributed`` turns, in order.

One thread on purpose: replies are recorded in the order the application received them
and each history is attributed after its predecessor's reply was recorded, so depth,
prefix model and handoff come out as if attribution had run on the request path.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable
from typing import Any

from handoffmon.attribution import Attributor, ModelNames, Prepared, degraded_context, normalize_messages
from handoffmon.ingress import Outcome, Request
from handoffmon.pipeline.errors import ErrorSink
from handoffmon.pipeline.records import Attributed, Deferred, Finished, Later
from handoffmon.pipeline.reply import calls_tools_only, last_user_text, reply_text
from handoffmon.types import UNKNOWN_MODEL, TurnContext

_UNKNOWN = (UNKNOWN_MODEL,)
_ALTERNATIVES = Outcome._fields.index("alternatives")

BATCH_BYTES = 8 * 1024 * 1024
"""Raw bodies (``weight``) one batch reads at once: parsed, a body of many small messages takes
about ten times its size in Python objects."""


class AttributionStage:
    """Attributes a captured history, reads who served the reply, records the reply.

    Args:
        attributor: fingerprints histories and replies.
        names: canonical model names.
        errors: the pipeline's error sink.
        submit: hands the ``Attributed`` turn on (to the checks); False when it was dropped.
        capture_content: keep the normalized messages for ``TurnResult.content``.
    """

    def __init__(
        self,
        *,
        attributor: Attributor,
        names: ModelNames,
        errors: ErrorSink,
        submit: Callable[[Attributed, str], bool],
        capture_content: bool = False,
        release: Callable[[int], object] = lambda n: None,
    ) -> None:
        self._attributor = attributor
        self._names = names
        self._errors = errors
        self._submit = submit
        self._capture_content = capture_content
        self._release = release

    def handle(self, item: Finished | Later) -> None:
        """Attribute, describe, record and hand on one turn (fail-open at every step). Its
        ``weight`` goes on with it to the checks, which give it back; if it goes no further,
        it is given back here."""
        weight, handed = item.weight, False
        try:
            if type(item) is Later:
                built = self._build(item)
                if built is None:
                    return
                item = built
            assert isinstance(item, Finished)
            handed = self._handle(item, self.context(item.capture.request))
        finally:
            if weight and not handed:
                self._release(weight)

    def handle_batch(self, items: list[Finished | Later]) -> None:
        """:meth:`handle` each turn in order, their histories looked up in the store in one
        call (``Attributor.prepare``) instead of one per turn: for a store that costs a round
        trip per call. Each turn's ``attribution`` overhead is its own work plus an equal
        share of that call. Turns holding raw bodies (``weight``) are read at most
        ``BATCH_BYTES`` of them at a time, so a batch of large requests is not all parsed at
        once."""
        start = 0
        while start < len(items):
            end, held = start + 1, items[start].weight
            while end < len(items) and held + items[end].weight <= BATCH_BYTES:
                held += items[end].weight
                end += 1
            handed = 0
            try:
                handed = self._batch(items[start:end])
            finally:
                if held - handed:
                    self._release(held - handed)
            start = end

    def _batch(self, items: list[Finished | Later]) -> int:
        """Handle a batch; returns the weight of the turns handed on to the checks."""
        finished: list[Finished] = []
        for item in items:
            built = self._build(item) if type(item) is Later else item
            if built is not None:
                assert isinstance(built, Finished)
                finished.append(built)
        if not finished:
            return 0
        t0 = time.perf_counter()
        # a call continuing a stored history chains from a seed of its own: attributed alone
        prepared = self._attributor.prepare(
            [None if _continues(f.capture.request) else f.capture.request.messages for f in finished]
        )
        share = (time.perf_counter() - t0) / len(finished)
        handed = 0
        for item, ready in zip(finished, prepared, strict=True):
            try:
                if self._handle(item, self.context(item.capture.request, ready, share)):
                    handed += item.weight
            except Exception as exc:  # as the worker would count it one by one
                self._errors.failed("pipeline", exc)
                self._errors.drop()
        return handed

    def _handle(self, item: Finished, ctx: TurnContext) -> bool:
        """Describe, record and hand on an attributed turn; False when it was dropped."""
        outcome = item.outcome
        if type(outcome) is Deferred:
            outcome = self._describe(outcome)
        assert isinstance(outcome, Outcome)
        raw = outcome.authors
        if len(raw) == 1 and raw[0]:  # the usual single author
            authors: tuple[str, ...] = (self._names.canonical(raw[0]),)
        else:
            authors = tuple(self._names.canonical(a) for a in raw if a) or _UNKNOWN
        link, alternatives = item.capture.request.link, outcome.alternatives
        if link is None and not alternatives:
            recorded = self._record(ctx, item.reply, authors)
        else:
            rid = outcome.response_id if link is not None and link.keep else None
            conversation = link.conversation if link is not None else None
            recorded = self._record(ctx, item.reply, authors, rid, conversation, alternatives)
        text = self._text(item.reply)
        turn = Attributed(
            ctx,
            recorded,
            text,
            # = _replace(authors=..., alternatives=()) without its kwargs work: the other
            # choices' content was for recording only, it goes no further
            Outcome._make((authors, *outcome[1:_ALTERNATIVES], (), *outcome[_ALTERNATIVES + 1 :])),
            item.streamed,
            item.latency_s,
            item.finished_at,
            item.capture.begin_s,
            item.finish_s,
            item.shadow,
            self._tools_only(item.reply, text),
            item.weight,
        )
        key = recorded.conversation_id if recorded is not None else ctx.conversation_id
        if not self._submit(turn, key):
            self._errors.drop()
            return False
        return True

    def _build(self, later: Later) -> Finished | None:
        """The ``Finished`` turn of a ``Monitor.finish_later`` call (``None``: nothing to record)."""
        try:
            got = later.build(*later.args)
        except Exception as exc:
            self._errors.failed("integration", exc, "could not read a call")
            return None
        if got is None:
            return None
        capture, reply, outcome, latency_s, shadow = got
        return Finished(
            capture,
            reply,
            outcome,
            later.streamed,
            latency_s,
            later.finished_at,
            later.finish_s,
            shadow,
            later.weight,
        )

    def context(
        self, request: Request, prepared: Prepared | None = None, spent_s: float = 0.0
    ) -> TurnContext:
        """The attributed context of a request (degraded, under a fresh id, if that failed);
        ``prepared``: its history as ``Attributor.prepare`` scanned and looked it up, which
        took ``spent_s`` of its attribution time."""
        t0 = time.perf_counter() - spent_s
        if request.messages is not None:
            try:
                return self._attributed(request, t0, prepared)
            except Exception as exc:
                self._errors.failed("attribution", exc)
        return self._degraded(request)

    def _attributed(self, request: Request, t0: float, prepared: Prepared | None = None) -> TurnContext:
        messages = request.messages
        assert messages is not None
        ctx = self._attributor.attribute(
            messages,
            conversation_id=request.conversation_id,
            requested_model=request.requested_model,
            metadata=request.metadata,
            started_at=request.received_at,
            prepared=prepared,
            previous_response_id=None if request.link is None else request.link.previous,
            provider_conversation=None if request.link is None else request.link.conversation,
        )
        # The context is fresh and not yet shared: fill the monitor-side fields in place
        # (dataclasses.replace would cost several µs).
        object.__setattr__(ctx, "user_message", last_user_text(messages))
        if self._capture_content:
            object.__setattr__(ctx, "input_messages", tuple(normalize_messages(messages)))
        object.__setattr__(ctx, "attribution_s", time.perf_counter() - t0)
        return ctx

    def _degraded(self, request: Request) -> TurnContext:
        """The fail-open context, under a fresh id so no state is shared."""
        messages = request.messages if request.messages is not None else ()
        try:
            user = last_user_text(messages)
        except Exception:
            user = ""
        ctx = degraded_context(
            messages,
            conversation_id=f"degraded-{uuid.uuid4().hex}",
            requested_model=request.requested_model,
            metadata=request.metadata,
            started_at=request.received_at,
        )
        return dataclasses.replace(ctx, conversation_id_source="derived", user_message=user)

    def _describe(self, deferred: Deferred) -> Outcome:
        try:
            return deferred.describe(*deferred.args)
        except Exception as exc:
            self._errors.failed("integration", exc)
            return Outcome()

    def _record(
        self,
        ctx: TurnContext,
        reply: Any,
        authors: tuple[str, ...],
        response_id: str | None = None,
        conversation: str | None = None,
        alternatives: tuple[Any, ...] = (),
    ) -> Any:
        try:
            return self._attributor.record(ctx, reply, authors, response_id, conversation, alternatives)
        except Exception as exc:
            self._errors.failed("record", exc)
            return None

    def _tools_only(self, reply: Any, text: str) -> bool:
        try:
            return calls_tools_only(reply, text)
        except Exception as exc:  # an SDK object that raises on attribute access: check the text
            self._errors.failed("record", exc)
            return False

    def _text(self, reply: Any) -> str:
        try:
            return reply_text(reply)
        except Exception as exc:
            self._errors.failed("record", exc)
            return ""


def _continues(request: Request) -> bool:
    """The call continues a history the provider stores (a previous response, a conversation)."""
    link = request.link
    return link is not None and (link.previous is not None or link.conversation is not None)
