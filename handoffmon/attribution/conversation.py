"""Derived conversation ids: from the first reply's chained fingerprint when the caller sent none.

Caller ids (headers, metadata) are read by the ingress layer (``handoffmon.ingress``).
"""

from __future__ import annotations

from hashlib import blake2b

DERIVED_PREFIX = "h-"
PENDING_PREFIX = "h-pending-"


def _hex(fingerprint: int, key: bytes | None) -> str:
    if key is None:
        return f"{fingerprint:016x}"
    return blake2b(fingerprint.to_bytes(8, "little"), key=key, digest_size=8).hexdigest()


def derived_conversation_id(first_reply_fingerprint: int, key: bytes | None = None) -> str:
    """``"h-"`` + 16 hex digits: the chained fingerprint of the conversation's first assistant
    message, or with ``key`` (``attribution.conversation_id_key``) its keyed BLAKE2b."""
    return f"{DERIVED_PREFIX}{_hex(first_reply_fingerprint, key)}"


def pending_conversation_id(history_fingerprint: int, key: bytes | None = None) -> str:
    """Provisional id of a depth-1 turn with no caller id (replaced by ``record()``); keyed as
    :func:`derived_conversation_id`."""
    return f"{PENDING_PREFIX}{_hex(history_fingerprint, key)}"
