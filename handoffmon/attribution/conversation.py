"""Derived conversation ids: from the first reply's chained fingerprint when the caller sent none.

Caller ids (headers, metadata) are read by the ingress layer (``handoffmon.ingress``).
"""

from __future__ import annotations

DERIVED_PREFIX = "h-"
PENDING_PREFIX = "h-pending-"


def derived_conversation_id(first_reply_fingerprint: int) -> str:
    """``"h-"`` + hex chained fingerprint of the conversation's first assistant message."""
    return f"{DERIVED_PREFIX}{first_reply_fingerprint:016x}"


def pending_conversation_id(history_fingerprint: int) -> str:
    """Provisional id of a depth-1 turn with no caller id (replaced by ``record()``)."""
    return f"{PENDING_PREFIX}{history_fingerprint:016x}"
