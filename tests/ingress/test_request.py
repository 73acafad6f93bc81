"""RequestParser: what a turn keeps of a request, from each call shape; nothing else (no content, no auth)."""

from __future__ import annotations

from typing import Any

from handoffmon.ingress import KEPT_KEYS, RequestParser

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
MESSAGES = [{"role": "user", "content": "hi"}]


def test_bare_call_keeps_a_snapshot_of_the_messages_and_nothing_else() -> None:
    """No metadata or headers: a copy of the list (the app appends to its own), no id, no metadata."""
    msgs = list(MESSAGES)
    req = RequestParser().router_call("g", msgs, {})
    msgs.append({"role": "assistant", "content": "later"})
    assert (req.messages, req.requested_model, req.conversation_id, req.metadata) == (MESSAGES, "g", None, {})
    assert req.messages is not msgs


def test_unreadable_messages_and_model_do_not_raise() -> None:
    """A history that is not a list is None (the turn is counted degraded); a non-string model is dropped."""
    req = RequestParser().parse("not a list", 42)
    assert (req.messages, req.requested_model) == (None, None)
    assert RequestParser().parse(("a", "b"), "g").messages == ["a", "b"]


def test_only_the_kept_metadata_survives() -> None:
    """Rules, tags, route, ids and traceparent stay; anything else (emails, keys) is dropped."""
    meta = {"handoffmon": {"rules": []}, "tags": ["t"], "route": "r", "user_email": "a@b.c", "api_key": "sk"}
    req = RequestParser().parse(MESSAGES, "g", meta, {"TraceParent": TP, "Authorization": "Bearer sk"})
    assert req.metadata == {"handoffmon": {"rules": []}, "tags": ["t"], "route": "r", "traceparent": TP}
    assert set(req.metadata) <= set(KEPT_KEYS)


def test_openai_call_merges_extra_body_metadata_under_the_metadata_param() -> None:
    """``metadata`` (OpenAI param) wins over ``extra_body.metadata`` per key; extra_body's session counts."""
    kwargs: dict[str, Any] = {
        "model": "g",
        "messages": MESSAGES,
        "metadata": {"tags": ["mine"]},
        "extra_body": {"metadata": {"tags": ["body"], "route": "r"}, "litellm_session_id": "s-1"},
    }
    req = RequestParser().openai_call(kwargs)
    assert req.metadata == {"tags": ["mine"], "route": "r", "litellm_session_id": "s-1"}
    assert req.conversation_id == "s-1"


def test_litellm_proxy_data_requester_metadata_and_generated_sessions() -> None:
    """The caller's requester_metadata counts; a session id LiteLLM generated itself does not."""
    data: dict[str, Any] = {
        "model": "g",
        "messages": MESSAGES,
        "litellm_session_id": "generated-uuid",
        "metadata": {
            "requester_metadata": {"tags": ["t"]},
            "session_id": "generated-uuid",
            "litellm_session_id_generated": True,
            "user_api_key": "hashed",
        },
    }
    req = RequestParser().litellm_proxy(data)
    assert req is not None and req.conversation_id is None and req.metadata == {"tags": ["t"]}
    data["metadata"].pop("litellm_session_id_generated")
    req = RequestParser().litellm_proxy(data)
    assert req is not None and req.conversation_id == "generated-uuid"
    assert (
        RequestParser().litellm_proxy({"model": "e", "input": ["x"]}) is None
    )  # embeddings: not a chat call


def test_litellm_parent_span_becomes_the_traceparent() -> None:
    """With LiteLLM's OTel callback, its parent span for the request is the turn's trace parent."""
    from opentelemetry.sdk.trace import TracerProvider

    with TracerProvider().get_tracer("t").start_as_current_span("litellm_proxy_request") as span:
        data = {"messages": MESSAGES, "metadata": {"litellm_parent_otel_span": span}}
        req = RequestParser().litellm_proxy(data)
    ctx = span.get_span_context()
    assert req is not None
    assert req.metadata["traceparent"] == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"


def test_the_current_span_is_the_traceparent_whatever_the_global_propagator() -> None:
    """``trace=True`` (``telemetry.otel``): the caller's current span becomes the turn's
    traceparent even where the application propagates B3 or baggage only (``OTEL_PROPAGATORS``),
    whose propagator writes no ``traceparent``; no span, no traceparent."""
    from opentelemetry import propagate
    from opentelemetry.baggage.propagation import W3CBaggagePropagator
    from opentelemetry.sdk.trace import TracerProvider

    parser = RequestParser(trace=True)
    before = propagate.get_global_textmap()
    propagate.set_global_textmap(W3CBaggagePropagator())
    try:
        with TracerProvider().get_tracer("t").start_as_current_span("app request") as span:
            req = parser.router_call("g", MESSAGES, {})
        outside = parser.router_call("g", MESSAGES, {})
    finally:
        propagate.set_global_textmap(before)
    ctx = span.get_span_context()
    assert req.metadata["traceparent"] == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"
    assert "traceparent" not in outside.metadata


def test_http_body_reads_only_conversation_headers() -> None:
    """serve: the configured header and traceparent are read from raw headers; auth never."""
    raw = [(b"authorization", b"Bearer sk-secret"), (b"X-Chat", b"c-9"), (b"traceparent", TP.encode())]
    req = RequestParser(conversation_header="x-chat").http_body({"model": "g", "messages": MESSAGES}, raw)
    assert req is not None and req.conversation_id == "c-9" and req.metadata == {"traceparent": TP}
    assert "sk-secret" not in repr(req) + repr(req.metadata)
    assert RequestParser().http_body({"model": "g"}, []) is None
    assert RequestParser().http_body(["not", "a", "dict"], []) is None


def test_repr_carries_no_content() -> None:
    """Requests reach logs: their repr counts messages, never shows them."""
    req = RequestParser().parse([{"role": "user", "content": "secret plan"}], "g")
    assert "secret" not in repr(req) and "messages=1" in repr(req)
