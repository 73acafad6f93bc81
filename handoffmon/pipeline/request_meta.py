"""The slice of request metadata a turn carries: rules, scope selectors, ids, trace parent — no content."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from handoffmon.attribution.conversation import CALLER_METADATA_KEYS

KEPT_KEYS: tuple[str, ...] = ("handoffmon", "tags", "route", "traceparent", *CALLER_METADATA_KEYS)
"""Metadata keys copied onto ``TurnContext.metadata``; anything else the caller sent is dropped."""


def _traceparent(headers: Mapping[str, str] | None) -> str | None:
    if not headers:
        return None
    value = headers.get("traceparent")
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == "traceparent"), None)
    return value if isinstance(value, str) else None


def _current_traceparent() -> str | None:
    """The W3C traceparent of the caller's current OpenTelemetry span, if there is one."""
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier.get("traceparent")


def turn_metadata(
    metadata: Mapping[str, Any] | None, headers: Mapping[str, str] | None, *, trace: bool
) -> dict[str, Any]:
    """What of the request's metadata the turn keeps (see ``KEPT_KEYS``).

    Args:
        metadata: the caller's metadata.
        headers: request headers (a ``traceparent`` header is kept).
        trace: also capture the current OpenTelemetry span as ``traceparent`` (with
            ``telemetry.otel``), so background spans can be parented to the request.
    """
    out: dict[str, Any] = {}
    if metadata:
        for key in KEPT_KEYS:
            if key in metadata:
                out[key] = metadata[key]
    if "traceparent" not in out:
        tp = _traceparent(headers) if headers else None
        if tp is None and trace:
            tp = _current_traceparent()
        if tp is not None:
            out["traceparent"] = tp
    return out
