"""The request parser: messages, conversation id, kept metadata (rules, route, tags, ids), traceparent.

Every adapter — ``wrap(litellm.Router)``, ``wrap(openai client)``, the LiteLLM Proxy
callback and ``handoffmon serve`` — turns its call into one ``Request`` here, so they
read conversation ids, per-request rules and trace context the same way.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from handoffmon.config import HandoffmonConfig
from handoffmon.ingress.conversation import (
    CALLER_HEADERS,
    CALLER_METADATA_KEYS,
    SESSION_KEY,
    caller_conversation_id,
    header,
)

RULES_KEY = "handoffmon"
"""Metadata namespace of per-request rules: ``metadata={"handoffmon": {"rules": [...]}}``."""

KEPT_KEYS: tuple[str, ...] = (RULES_KEY, "tags", "route", "traceparent", *CALLER_METADATA_KEYS)
"""Metadata keys a turn keeps (``TurnContext.metadata``); anything else the caller sent is dropped."""

LITELLM_GENERATED = "litellm_session_id_generated"
"""LiteLLM Proxy marks session ids it invented (``missing_session_id: generate``) with this key."""


class ResponseLink(NamedTuple):
    """Where a Responses API call sits in a history the provider stores (ADR 0011): a chain of
    responses, or a ``conversation`` object.

    Attributes:
        previous: the ``previous_response_id`` the call continues (its history is the
            provider's: the request carries only the new input), or ``None``.
        keep: the provider stores this call's response (``store`` not ``false``), so a later
            call may continue it: the reply is also recorded under its response id.
    """

    previous: str | None
    keep: bool
    conversation: str | None = None
    """The provider ``conversation`` object the call continues (its history kept under that id)."""


class Request(NamedTuple):
    """One parsed chat request: what the monitor keeps of it (no other content, no auth).

    A NamedTuple, built once per call on the request path (cheaper than a frozen dataclass).

    Attributes:
        messages: the request's messages (a new list of the same message objects: the
            application appends to its own list); ``None`` when they were unreadable (the
            turn is counted with a degraded context).
        requested_model: the model or group the application asked for.
        conversation_id: the caller's conversation id, if it sent one.
        metadata: the kept metadata (``KEPT_KEYS``), with ``traceparent`` when known.
        received_at: ``time.perf_counter()`` when parsing began (latency and overhead).
        link: a Responses API call's place in a chain the provider stores (``None``: a chat
            call, or a Responses call whose response is not stored and continues none).
    """

    messages: list[Any] | None
    requested_model: str | None
    conversation_id: str | None
    metadata: dict[str, Any]
    received_at: float
    link: ResponseLink | None = None

    def __repr__(self) -> str:  # no message content in reprs (they reach logs)
        n = None if self.messages is None else len(self.messages)
        return f"Request(messages={n}, requested_model={self.requested_model!r})"


def _messages(messages: Any) -> list[Any] | None:
    if type(messages) is list:
        return messages.copy()
    if isinstance(messages, (list, tuple)):
        return list(messages)
    return None


def _mapping(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


def _current_traceparent() -> str | None:
    """The W3C traceparent of the caller's current OpenTelemetry span, if there is one.

    Read from the span itself, not through the application's global propagator: with
    ``OTEL_PROPAGATORS`` set to B3, X-Ray or baggage only, that writes no ``traceparent``, and
    the turn's events would lose the caller's trace."""
    from opentelemetry import trace

    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def _span_traceparent(span: Any) -> str | None:
    """The traceparent of an OpenTelemetry span object (LiteLLM's ``litellm_parent_otel_span``)."""
    if not callable(getattr(span, "get_span_context", None)):
        return None
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent")


class RequestParser:
    """Parses calls into ``Request`` records; one per adapter, built from config.

    Args:
        conversation_header: the configured conversation-id header (read first).
        trace: capture the caller's current OpenTelemetry span as ``traceparent`` when the
            request carries none (``telemetry.otel``).
    """

    __slots__ = ("header_name", "trace")

    def __init__(self, *, conversation_header: str = "x-conversation-id", trace: bool = False) -> None:
        self.header_name = conversation_header
        self.trace = trace

    @classmethod
    def from_config(cls, config: HandoffmonConfig) -> RequestParser:
        """From ``attribution.conversation_header`` and ``telemetry.otel``."""
        return cls(conversation_header=config.attribution.conversation_header, trace=config.telemetry.otel)

    # -- one core ---------------------------------------------------------------------------

    def parse(
        self,
        messages: Any,
        model: Any,
        metadata: Mapping[str, Any] | None = None,
        headers: Mapping[str, Any] | None = None,
        session_id: Any = None,
        traceparent: str | None = None,
        received_at: float | None = None,
    ) -> Request:
        """The one parse every adapter ends in. Never raises on odd input.

        Args:
            messages: the chat messages (a list; anything else gives ``messages=None``).
            model: the requested model or group (kept when it is a string).
            metadata: the caller's metadata (only ``KEPT_KEYS`` are kept).
            headers: request headers (conversation-id headers, ``traceparent``).
            session_id: LiteLLM's ``litellm_session_id`` parameter (see
                ``caller_conversation_id`` for where it ranks).
            traceparent: trace context the adapter found itself (LiteLLM's parent span).
            received_at: ``perf_counter`` at the start of the call (default: now).
        """
        t0 = time.perf_counter() if received_at is None else received_at
        msgs = _messages(messages)
        requested = model if isinstance(model, str) else None
        bare = metadata is None and headers is None and session_id is None and traceparent is None
        if bare and not self.trace:  # the common case: nothing else to look up
            return Request(msgs, requested, None, {}, t0)
        cid = caller_conversation_id(
            headers=headers, metadata=metadata, header_name=self.header_name, session_id=session_id
        )
        return Request(msgs, requested, cid, self._kept(metadata, headers, session_id, traceparent), t0)

    def _kept(
        self,
        metadata: Mapping[str, Any] | None,
        headers: Mapping[str, Any] | None,
        session_id: Any,
        traceparent: str | None,
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if metadata:
            for key in KEPT_KEYS:
                if key in metadata:
                    out[key] = metadata[key]
        if session_id is not None:
            out[SESSION_KEY] = session_id  # the parameter wins over a metadata key of that name
        if "traceparent" not in out:
            tp = traceparent
            if tp is None and headers:
                found = header(headers, "traceparent")
                tp = found if isinstance(found, str) else None
            if tp is None and self.trace:
                tp = _current_traceparent()
            if tp is not None:
                out["traceparent"] = tp
        return out

    # -- the four adapters' shapes -------------------------------------------------------------

    def router_call(
        self, model: Any, messages: Any, kwargs: Mapping[str, Any], received_at: float | None = None
    ) -> Request:
        """``Router.completion(model, messages, **kwargs)``: ``metadata``, ``litellm_session_id``,
        ``extra_headers`` (or ``headers``). ``received_at``: when the call began (default: now)."""
        t0 = time.perf_counter() if received_at is None else received_at
        if not kwargs:
            return self.parse(messages, model, received_at=t0)
        h = kwargs.get("extra_headers") or kwargs.get("headers")
        return self.parse(
            messages,
            model,
            _mapping(kwargs.get("metadata")),
            _mapping(h),
            kwargs.get(SESSION_KEY),
            received_at=t0,
        )

    def openai_call(self, kwargs: Mapping[str, Any]) -> Request:
        """``client.chat.completions.create(**kwargs)``: ``metadata`` over ``extra_body.metadata``,
        ``extra_body.litellm_session_id``, ``extra_headers``."""
        t0 = time.perf_counter()
        body = _mapping(kwargs.get("extra_body"))
        metadata = _mapping(kwargs.get("metadata"))
        session = None
        if body is not None:
            body_meta = _mapping(body.get("metadata"))
            if body_meta:
                metadata = {**body_meta, **metadata} if metadata else body_meta
            session = body.get(SESSION_KEY)
        return self.parse(
            kwargs.get("messages"),
            kwargs.get("model"),
            metadata,
            _mapping(kwargs.get("extra_headers")),
            session,
            received_at=t0,
        )

    def litellm_proxy(self, data: Mapping[str, Any]) -> Request | None:
        """A LiteLLM Proxy call's request data; ``None`` when it is not a chat completion.

        The caller's own metadata is ``requester_metadata`` inside LiteLLM's ``metadata`` (or
        ``litellm_metadata``); rules, tags, route and ids LiteLLM keeps beside it count too.
        Session ids LiteLLM generated itself (one per request) are not conversation ids.
        Trace context comes from LiteLLM's parent span when its OTel callback made one.
        """
        t0 = time.perf_counter()
        messages = data.get("messages")
        if not isinstance(messages, list):
            return None  # embeddings, responses, images ...
        meta: dict[str, Any] = {}
        generated = False
        litellm_meta: Mapping[str, Any] | None = None
        for key in ("litellm_metadata", "metadata"):
            section = _mapping(data.get(key))
            if section is None:
                continue
            litellm_meta = litellm_meta or section
            generated = generated or bool(section.get(LITELLM_GENERATED))
            user = _mapping(section.get("requester_metadata"))
            if user:
                meta.update(user)
            for k in KEPT_KEYS:
                if k in section and k not in meta:
                    meta[k] = section[k]
        if generated:
            meta.pop("session_id", None)
        session = None if generated else data.get(SESSION_KEY)
        headers = None
        psr = _mapping(data.get("proxy_server_request"))
        if psr is not None:
            headers = _mapping(psr.get("headers"))
        if headers is None and litellm_meta is not None:
            headers = _mapping(litellm_meta.get("headers"))
        parent = litellm_meta.get("litellm_parent_otel_span") if litellm_meta is not None else None
        return self.parse(
            messages,
            data.get("model"),
            meta or None,
            headers,
            session,
            _span_traceparent(parent) if parent is not None else None,
            received_at=t0,
        )

    def http_body(
        self, body: Any, raw_headers: Iterable[tuple[bytes, bytes]], received_at: float | None = None
    ) -> Request | None:
        """A decoded ``/v1/chat/completions`` JSON body and its raw ASGI headers (``serve``).

        Only the conversation-id headers and ``traceparent`` are read (never auth headers).
        ``None`` when the body is not a chat request (no ``messages`` list).
        ``received_at``: ``perf_counter`` when the request arrived (default: now).
        """
        t0 = time.perf_counter() if received_at is None else received_at
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return None
        wanted = (self.header_name.lower(), *CALLER_HEADERS, "traceparent")
        headers: dict[str, str] = {}
        for k, v in raw_headers:
            name = k.decode("latin-1").lower()
            if name in wanted:
                headers[name] = v.decode("latin-1")
        return self.parse(
            body["messages"],
            body.get("model"),
            _mapping(body.get("metadata")),
            headers or None,
            body.get(SESSION_KEY),
            received_at=t0,
        )
