"""Pins the derived conversation id's shape."""

from __future__ import annotations

from handoffmon.attribution import derived_conversation_id


def test_derived_id_shape() -> None:
    """Derived ids are `h-` plus the 16-hex-digit chained fingerprint."""
    assert derived_conversation_id(0xABC) == "h-0000000000000abc"
