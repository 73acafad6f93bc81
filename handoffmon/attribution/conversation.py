"""Conversation ids: from the caller when given, otherwise derived from the first reply's chain."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CALLER_HEADERS = ("x-conversation-id", "x-litellm-session-id")
"""Headers read (case-insensitively) after the configured one."""

CALLER_METADATA_KEYS = ("conversation_id", "session_id", "litellm_session_id", "gen_ai.conversation.id")
"""Metadata keys read, in order (LiteLLM ``metadata``, OTel ``gen_ai.conversation.id``)."""

MAX_ID_CHARS = 256
"""Longer caller ids are truncated (they end up in logs and exemplars)."""

DERIVED_PREFIX = "h-"
PENDING_PREFIX = "h-pending-"


def _clean(value: Any) -> str | None:
    if value is None:
        return None
    text = value.strip() if isinstance(value, str) else str(value).strip()
    return text[:MAX_ID_CHARS] or None


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        lower = name.lower()
        value = next((v for k, v in headers.items() if k.lower() == lower), None)
    return _clean(value)


def caller_conversation_id(
    *,
    headers: Mapping[str, str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    header_name: str = "x-conversation-id",
) -> str | None:
    """The conversation id the caller sent, if any.

    Order: the configured header, ``X-Conversation-Id``, ``x-litellm-session-id`` (all
    case-insensitive); then ``metadata`` keys ``conversation_id``, ``session_id``,
    ``litellm_session_id``, ``gen_ai.conversation.id``; then the same keys inside a nested
    ``metadata["metadata"]`` (LiteLLM passes request metadata that way).

    Args:
        headers: request headers.
        metadata: request or LiteLLM metadata.
        header_name: configured header (``attribution.conversation_header``).
    """
    if headers:
        for name in (header_name, *CALLER_HEADERS):
            found = _header(headers, name)
            if found:
                return found
    if metadata:
        for source in (metadata, metadata.get("metadata")):
            if not isinstance(source, Mapping):
                continue
            for key in CALLER_METADATA_KEYS:
                found = _clean(source.get(key))
                if found:
                    return found
    return None


def derived_conversation_id(first_reply_fingerprint: int) -> str:
    """``"h-"`` + hex chained fingerprint of the conversation's first assistant message."""
    return f"{DERIVED_PREFIX}{first_reply_fingerprint:016x}"


def pending_conversation_id(history_fingerprint: int) -> str:
    """Provisional id of a depth-1 turn with no caller id (replaced by ``record()``)."""
    return f"{PENDING_PREFIX}{history_fingerprint:016x}"
