"""Caller text the stores must hold though it is not UTF-8: a lone surrogate (JSON ``"\\ud800"``)."""

from __future__ import annotations


def is_utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (no lone surrogate); ASCII answered without encoding."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
