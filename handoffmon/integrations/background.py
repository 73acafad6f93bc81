"""The weight of a wrapped client's parked background Responses call (``runtime.background``).

The OpenAI client wrapper parks a ``background=True`` call's turn (its capture, or its pending
read) in a :class:`handoffmon.runtime.background.Background` until a ``retrieve`` through the
wrapper returns the response finished; a reply read any other way — ``retrieve(id,
stream=True)``, a ``with_raw_response`` or ``with_streaming_response`` retrieve, another
process — is not recorded (docs/operations/known-issues.md).
"""

from __future__ import annotations

from typing import Any

from handoffmon.integrations.held import held_bytes


def history_bytes(ctx: Any) -> int:
    """``held_bytes`` of a parked call's history: a capture's messages, or a pending call's
    ``input``."""
    request = getattr(ctx, "request", None)
    if request is not None:
        return held_bytes(request.messages)
    kwargs = getattr(ctx, "kwargs", None)
    return held_bytes(kwargs.get("input")) if isinstance(kwargs, dict) else 0
