"""Turn attribution: chained fingerprints, content fallback, conversation ids, model names."""

from __future__ import annotations

from handoffmon.attribution.attributor import (
    Attributor,
    OnError,
    Prepared,
    RecordedReply,
    degraded_context,
)
from handoffmon.attribution.conversation import derived_conversation_id
from handoffmon.attribution.names import ModelNames
from handoffmon.attribution.normalize import normalize_message, normalize_messages
from handoffmon.attribution.pending import merge_authorship

__all__ = [
    "Attributor",
    "ModelNames",
    "OnError",
    "Prepared",
    "RecordedReply",
    "degraded_context",
    "derived_conversation_id",
    "merge_authorship",
    "normalize_message",
    "normalize_messages",
]
