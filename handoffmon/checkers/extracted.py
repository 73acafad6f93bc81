"""What conversation state keeps of values stateful checkers extract: keyed fingerprints, or text by opt-in.

A stateful checker (``answer_flip``) hands back the answer it found in a reply; the next
turn needs to know whether the new answer is the same. Conversation state can live in
Redis or SQLite, so the value itself would be reply content in a shared store. Stored
forms:

- ``fp1:<key id>:<digest>``: BLAKE2b keyed with a secret, over the rule name and the value.
  A store reader cannot test guesses ("42"?) without the key. A fingerprint made under
  another key (another replica, a restart with a random key) reads as "nothing stored",
  never as a changed answer.
- ``tx1:<expiry epoch s>:<fingerprint>:<text>``: opt-in (``rule_state.text_ttl_s``); the
  text is readable until the expiry, the fingerprint after it.
- anything else is a value in clear: what offline runs (``check``, evals) keep, since
  their state never leaves the process: :data:`CLEAR` reads and writes it.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable

FINGERPRINT = "fp1:"
TEXT = "tx1:"


class ExtractedMemory:
    """How extracted values are stored and compared (see the module docstring)."""

    clear = True

    def remember(self, rule: str, value: str) -> str:
        """The stored form of ``value`` extracted by ``rule``: here, ``value`` itself."""
        return value

    def same(self, rule: str, stored: str | None, value: str) -> bool | None:
        """Whether ``stored`` holds ``value``; ``None`` when nothing comparable is stored."""
        return None if stored is None else stored == value

    def recall(self, stored: str | None) -> str | None:
        """The text ``stored`` holds, if it is kept (and has not expired)."""
        return stored


CLEAR = ExtractedMemory()
"""Values kept as they are: offline runs (``check``, evals) and tests, whose state stays in the process."""


class FingerprintMemory(ExtractedMemory):
    """Keyed fingerprints of extracted values, optionally with the text for a while.

    Args:
        key: the fingerprint secret; ``None`` draws a random one (valid for this process only).
        text_ttl_s: also keep the text this long (0: fingerprints only).
        clock: wall clock in seconds (expiry times are stored, so it must be wall time).
    """

    clear = False

    def __init__(
        self, key: bytes | None = None, *, text_ttl_s: float = 0.0, clock: Callable[[], float] = time.time
    ) -> None:
        self.key_is_random = key is None
        self._key = os.urandom(32) if key is None else hashlib.blake2b(key, digest_size=32).digest()
        self._key_id = hashlib.blake2b(b"key id", key=self._key, digest_size=4).hexdigest()
        self._text_ttl_s = text_ttl_s
        self._clock = clock

    def _fingerprint(self, rule: str, value: str) -> str:
        data = f"{rule}\x00{value}".encode("utf-8", "surrogatepass")
        digest = hashlib.blake2b(data, key=self._key, digest_size=16).hexdigest()
        return f"{FINGERPRINT}{self._key_id}:{digest}"

    def remember(self, rule: str, value: str) -> str:
        """A fingerprint, preceded by the text and its expiry when text is kept."""
        fingerprint = self._fingerprint(rule, value)
        if self._text_ttl_s <= 0:
            return fingerprint
        return f"{TEXT}{int(self._clock() + self._text_ttl_s)}:{fingerprint}:{value}"

    def same(self, rule: str, stored: str | None, value: str) -> bool | None:
        """Compares fingerprints; one made under another key reads as nothing stored."""
        if stored is None:
            return None
        if stored.startswith(TEXT):
            stored = _split_text(stored)[1]
        elif not stored.startswith(FINGERPRINT):  # clear text, written before fingerprints
            return stored == value
        if not stored.startswith(f"{FINGERPRINT}{self._key_id}:"):
            return None
        return stored == self._fingerprint(rule, value)

    def recall(self, stored: str | None) -> str | None:
        """The kept text until it expires; never a fingerprint."""
        if stored is None or stored.startswith(FINGERPRINT):
            return None
        if not stored.startswith(TEXT):
            return stored
        expiry, _, text = _split_text(stored)
        return text if expiry >= self._clock() else None


def _split_text(stored: str) -> tuple[float, str, str]:
    """(expiry, fingerprint, text) of a ``tx1:`` value; expiry 0 when malformed."""
    parts = stored[len(TEXT) :].split(":", 4)  # expiry, "fp1", key id, digest, text
    if len(parts) != 5:
        return 0.0, "", ""
    try:
        expiry = float(parts[0])
    except ValueError:
        return 0.0, "", ""
    return expiry, f"{parts[1]}:{parts[2]}:{parts[3]}", parts[4]


def without_expired_text(stored: str, now_s: float) -> str | None:
    """``stored`` with its text dropped once expired (its fingerprint kept); ``None``: drop it."""
    if not stored.startswith(TEXT):
        return stored
    expiry, fingerprint, _ = _split_text(stored)
    if not fingerprint:
        return None
    return stored if expiry >= now_s else fingerprint
