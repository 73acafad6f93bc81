"""Caller conversation ids: every header and metadata key a client may carry one in, in one order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from handoffmon.ingress.fields import UNREADABLE, text_of
from handoffmon.labels import exportable

CALLER_HEADERS = ("x-conversation-id", "x-litellm-session-id")
"""Headers read (case-insensitively) after the configured one."""

CALLER_METADATA_KEYS = ("conversation_id", "session_id", "litellm_session_id", "gen_ai.conversation.id")
"""Metadata keys read, in order (LiteLLM ``metadata``, OTel ``gen_ai.conversation.id``)."""

SESSION_KEY = "litellm_session_id"
"""LiteLLM's request parameter (and metadata key) for the session."""

MAX_ID_BYTES = 256
"""Longer caller ids are truncated to this many UTF-8 bytes, never inside a character (they
end up in logs, exemplars and every stored attribution value; a character cut made a
256-emoji id 1 KB)."""


def clean_id(value: Any) -> str | None:
    """A caller id as text: stripped, characters that are not printable (a lone surrogate: JSON
    ``"\\ud800"``; controls) spelled as their escapes (``labels.exportable``), truncated to
    ``MAX_ID_BYTES`` of UTF-8 (whole characters); ``None`` when blank.

    The id is exported (OpenMetrics exemplars, OTel attributes, logs), and text that is not
    UTF-8 fails there: one exemplar holding a lone surrogate made every ``/metrics`` scrape
    raise. Escaped, two such ids stay two ids."""
    if value is None:
        return None
    if not isinstance(value, str):
        value = text_of(value)
        if value == UNREADABLE:  # nested past the recursion limit: no id to read
            return None
    text = exportable(value.strip())
    if len(text) * 4 <= MAX_ID_BYTES:  # short enough whatever its characters
        return text or None
    raw = text.encode("utf-8")
    if len(raw) <= MAX_ID_BYTES:
        return text
    end = MAX_ID_BYTES
    while raw[end] & 0xC0 == 0x80:  # a continuation byte: the cut would split its character
        end -= 1
    return raw[:end].decode("utf-8") or None


def header(headers: Mapping[str, Any], name: str) -> Any:
    """A header's value, its name matched case-insensitively (``None`` when absent)."""
    value = headers.get(name)
    if value is None:
        lower = name.lower()
        value = next((v for k, v in headers.items() if isinstance(k, str) and k.lower() == lower), None)
    return value


def caller_conversation_id(
    *,
    headers: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
    header_name: str = "x-conversation-id",
    session_id: Any = None,
) -> str | None:
    """The conversation id the caller sent, if any.

    Order: the configured header, ``X-Conversation-Id``, ``x-litellm-session-id`` (all
    case-insensitive); then ``metadata`` keys ``conversation_id``, ``session_id``,
    ``litellm_session_id``, ``gen_ai.conversation.id``; then the same keys inside a nested
    ``metadata["metadata"]``. ``session_id`` is LiteLLM's ``litellm_session_id`` request
    parameter: it takes the ``litellm_session_id`` place, ahead of a metadata key of that
    name (LiteLLM groups its own logs by the parameter, so handoffmon does too).

    Args:
        headers: request headers.
        metadata: request or LiteLLM metadata.
        header_name: configured header (``attribution.conversation_header``).
        session_id: the ``litellm_session_id`` request parameter, if sent.
    """
    if headers:
        for name in (header_name, *CALLER_HEADERS):
            value = header(headers, name)  # a header is text: an SDK's ``omit`` sends none
            found = clean_id(value) if isinstance(value, str) else None
            if found:
                return found
    session = clean_id(session_id)
    sources = (metadata, metadata.get("metadata")) if metadata else ()
    for i, source in enumerate(sources):
        if not isinstance(source, Mapping):
            continue
        for key in CALLER_METADATA_KEYS:
            if key == SESSION_KEY and session and i == 0:
                return session
            found = clean_id(source.get(key))
            if found:
                return found
    return session
