"""Chained and content-only fingerprints (xxh3_64) over normalized messages, with a text cache.

The chain: ``h_0 = CHAIN_SEED``; for every non-system message ``i``,
``h_i = xxh3_64(d_i, seed = h_{i-1} XOR salt(role_i))`` where ``d_i`` is the message
digest: xxh3_64 of the folded content (a ``refusal`` is content), re-seeded with the canonical
tool calls and tool-call id when present. A message's ``name`` is left out: the application
adds it (agent frameworks name each agent's messages), no model returns it.
``system``/``developer`` messages are not chained.
"""

from __future__ import annotations

from collections.abc import Mapping
from sys import getsizeof
from typing import Any

from xxhash import xxh3_64_intdigest

from handoffmon.attribution.normalize import (
    as_mapping,
    content_text,
    extras_text,
    fold,
    message_text,
    role_of,
    tool_calls_text,
)
from handoffmon.types import Message

CHAIN_SEED = xxh3_64_intdigest(b"handoffmon/chain/v1")
"""``h_0`` of every chain."""

UNCHAINED_ROLES = frozenset({"system", "developer"})
"""Roles left out of the chain: their content (timestamps, per-request context) changes
from one request to the next without changing the conversation."""

DEFAULT_MIN_CONTENT_CHARS = 32
"""Below this many characters a content-only key is bound to the preceding message."""


def _salt(role: str) -> int:
    return int(xxh3_64_intdigest(f"handoffmon/role/{role}".encode("utf-8", "surrogatepass")))


ROLE_SALTS: Mapping[str, int] = {r: _salt(r) for r in ("user", "assistant", "tool", "function", "system")}
"""Precomputed salts of the usual roles."""


def role_salt(role: object) -> int:
    """64-bit salt of a role (precomputed for the usual roles)."""
    if type(role) is str:
        salt = ROLE_SALTS.get(role)
        return salt if salt is not None else _salt(role)
    return _salt(str(role))


ASSISTANT_SALT = role_salt("assistant")
USER_SALT = role_salt("user")


def text_digest(text: str) -> int:
    """xxh3_64 of already-folded text."""
    return xxh3_64_intdigest(text.encode("utf-8", "surrogatepass"))


def with_extras(digest: int, extras: str) -> int:
    """Fold tool calls and tool-call id (``extras_text``) into a text digest."""
    if not extras:
        return digest
    return xxh3_64_intdigest(extras.encode("utf-8", "surrogatepass"), seed=digest)


def chain_step(prev: int, role: object, digest: int) -> int:
    """``h_i`` from ``h_{i-1}``, the role and the message digest."""
    return xxh3_64_intdigest(digest.to_bytes(8, "little"), seed=prev ^ role_salt(role))


def context_digest(role: object, digest: int) -> int:
    """Chain-independent digest of one message (binds short replies to what preceded them)."""
    return xxh3_64_intdigest(digest.to_bytes(8, "little"), seed=role_salt(role))


def content_fingerprint(digest: int, length: int, prev_context: int, min_chars: int) -> int:
    """Content-only fingerprint of an assistant message.

    Messages of at least ``min_chars`` characters are keyed by their digest alone; shorter
    ones ("Sure!") by their digest and the preceding message's ``context_digest``.
    """
    if length >= min_chars:
        return digest
    return xxh3_64_intdigest(digest.to_bytes(8, "little"), seed=prev_context)


def chain_key(fingerprint: int) -> str:
    """Store key of a chained fingerprint."""
    return "c:" + hex(fingerprint)


def content_key(fingerprint: int) -> str:
    """Store key of a content-only fingerprint."""
    return "k:" + hex(fingerprint)


RESPONSE_SEED = xxh3_64_intdigest(b"handoffmon/response/v1")
"""Seed of response-id fingerprints (``response_key``, ``continuation_seed``)."""

RESPONSE_AUTHORS = 64
"""Assistant messages a response key summarizes (its last ones; ``response_key``)."""


def response_fingerprint(response_id: str) -> int:
    """64-bit fingerprint of a Responses API response id."""
    return xxh3_64_intdigest(response_id.encode("utf-8", "surrogatepass"), RESPONSE_SEED)


def response_key(response_id: str) -> str:
    """Store key of a stored response (ADR 0011): its value's ``authors`` are the authors of
    the history's assistant messages through that response, one per message, oldest first
    (the last ``RESPONSE_AUTHORS``); its ``depth`` the response's turn."""
    return "r:" + hex(response_fingerprint(response_id))


def conversation_head_key(conversation: str) -> str:
    """Store key under which the head of a provider ``conversation`` object is kept (ADR 0011):
    its value's ``authors`` are the authors of its assistant messages (the last
    ``RESPONSE_AUTHORS``), its ``depth`` the conversation's length. A fingerprint key of its
    own kind (``h:``), written with ``put_many`` (overwritten each turn, never merged): not a
    conversation state id, so no caller conversation id can read or write it (heads were
    state ids ``hm-conversation-head:0x…``, which a caller could send as its own id)."""
    return "h:" + hex(response_fingerprint("conversation:" + conversation))


def conversation_seed(conversation: str, depth: int) -> int:
    """Chain seed of a call continuing provider conversation ``conversation`` at ``depth``."""
    return response_fingerprint(f"conversation:{depth}:{conversation}") ^ CHAIN_SEED


def continuation_seed(previous_response_id: str) -> int:
    """Chain seed of a request continuing a stored response: its visible messages chain from
    here instead of ``CHAIN_SEED`` (the hidden history is not hashed), so their keys are this
    chain's own."""
    return response_fingerprint(previous_response_id) ^ CHAIN_SEED


_STR_HEADER_BYTES = getsizeof("")
"""An ASCII string's bytes less its characters (``ENTRY_OVERHEAD_BYTES`` counts the header)."""


class TextCache:
    """Bounded cache: raw content string → digest of its folded text, folded length, digest bytes.

    Safe because strings are immutable and folding is a pure function. Clients resend
    every message on every later turn, so folding runs about once per message. Bounded
    by an estimate of the memory held — each entry costs its string's bytes (1, 2 or 4 a
    character: CPython stores a string with an emoji at 4 bytes a character) plus
    ``ENTRY_OVERHEAD_BYTES`` (the key object, the value tuple and the dict slot), so many
    short messages cannot outgrow the bound; when full it is cleared (cheap, and refills
    in a turn). Strings over ``max_bytes / 64`` bytes are never cached (they would flush
    the rest).

    Args:
        max_bytes: estimated bytes held before the cache is cleared.
    """

    ENTRY_OVERHEAD_BYTES = 300
    """Measured with tracemalloc: ~49 B str header + 64 B tuple + 32 B int + 41 B bytes + dict slot."""

    __slots__ = ("_chars", "entries", "max_chars")

    def __init__(self, max_bytes: int = 16_000_000) -> None:
        self.max_chars = max_bytes
        self.entries: dict[str, tuple[int, int, bytes]] = {}
        """Read-only for callers (the attributor's hot loop probes it directly)."""
        self._chars = 0

    def text(self, content: Any) -> tuple[int, int, bytes]:
        """(digest, folded length, digest as 8 little-endian bytes) of a raw ``content``."""
        if type(content) is str:
            hit = self.entries.get(content)
            if hit is not None:
                return hit
            value = _text_entry(fold(content))
            size = getsizeof(content) - _STR_HEADER_BYTES + self.ENTRY_OVERHEAD_BYTES
            if size <= self.max_chars >> 6:
                if self._chars + size > self.max_chars:
                    self.entries.clear()
                    self._chars = 0
                self.entries[content] = value
                self._chars += size
            return value
        return _text_entry(content_text(content))

    def __len__(self) -> int:
        return len(self.entries)


class PrefixCache:
    """Bounded cache: a history of plain ``{role, content: str}`` dicts → the attributor's scan state.

    The next turn of a conversation is the previous history plus the reply and a new user
    message (a retry is the same history); the attributor resumes from the state of
    ``messages[:-2]`` (or ``messages``) after comparing it
    in full with the copy kept here (by value: a client may edit its history, in place or
    not). Keyed by the last message's content; ``take`` removes the entry, so a
    conversation holds one entry, for its latest turn. Bounded by an estimate of the
    memory held — each message costs its characters plus ``MESSAGE_OVERHEAD_BYTES`` (the
    copied dict, its slot in the list and in the state); when full it is cleared.
    Histories over ``max_bytes / 16`` are not kept.

    Args:
        max_bytes: estimated bytes held before the cache is cleared.
    """

    MESSAGE_OVERHEAD_BYTES = 400
    """~184 B dict + 8 B list slot + ~50 B role and string headers + the state's ints, rounded up."""

    __slots__ = ("_bytes", "_entries", "max_bytes")

    def __init__(self, max_bytes: int = 16_000_000) -> None:
        self.max_bytes = max_bytes
        self._entries: dict[str, tuple[int, list[dict[str, str]], tuple[Any, ...]]] = {}
        self._bytes = 0

    def take(self, last_content: str, length: int) -> tuple[list[dict[str, str]], tuple[Any, ...]] | None:
        """Remove and return (history copy, state) of the history ending in ``last_content``
        if it has ``length`` messages (the caller compares the copy with its history)."""
        hit = self._entries.pop(last_content, None)
        if hit is None:
            return None
        self._bytes -= hit[0]
        return (hit[1], hit[2]) if len(hit[1]) == length else None

    def could_keep(self, messages: int) -> bool:
        """Whether a history of this many messages may fit (whatever their characters): the
        attributor copies a history only then (a copy of a 1M-message history was ~190 MB)."""
        return messages * self.MESSAGE_OVERHEAD_BYTES <= self.max_bytes >> 4

    def remember(self, history: list[dict[str, str]], held_chars: int, state: tuple[Any, ...]) -> None:
        """Keep a non-empty history copy (which the caller no longer changes) and its state."""
        size = held_chars + len(history) * self.MESSAGE_OVERHEAD_BYTES
        if size > self.max_bytes >> 4:
            return
        key = history[-1]["content"]
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old[0]
        if self._bytes + size > self.max_bytes:
            self._entries.clear()
            self._bytes = 0
        self._entries[key] = (size, history, state)
        self._bytes += size

    def __len__(self) -> int:
        return len(self._entries)


def _text_entry(folded: str) -> tuple[int, int, bytes]:
    d = text_digest(folded)
    return d, len(folded), d.to_bytes(8, "little")


def raw_extras(m: Mapping[str, Any]) -> str:
    """``extras_text`` of a raw message mapping (``""`` for plain role+content messages, and for
    a ``name`` alone: see ``extras_text``)."""
    call_id = m.get("tool_call_id")
    return extras_text(
        tool_calls_text(m.get("tool_calls"), m.get("function_call")),
        call_id if isinstance(call_id, str) else "",
    )


def message_digest(msg: Message) -> tuple[int, int]:
    """(digest, length) of a normalized message: the same values the fast path computes."""
    extras = extras_text(msg.tool_calls, msg.tool_call_id)
    return with_extras(text_digest(msg.content), extras), len(msg.content) + len(extras)


def raw_digest(raw: Any, cache: TextCache) -> tuple[str, int, int]:
    """(role, digest, length) of one raw message, through the text cache.

    Agrees with ``message_digest(normalize_message(raw))`` (a property test pins it).
    """
    if isinstance(raw, Message):
        d, n = message_digest(raw)
        return raw.role, d, n
    m: Mapping[str, Any]
    if type(raw) is dict:
        m = raw
    elif isinstance(raw, str):
        m = {"role": "user", "content": raw}
    else:
        m = as_mapping(raw)
    d, n, _ = cache.text(m.get("content"))
    if len(m) > 2 or "content" not in m or "role" not in m:
        refusal = m.get("refusal")
        if refusal and isinstance(refusal, str):  # the refusal is text (``message_text``)
            d, n, _ = _text_entry(message_text(m.get("content"), refusal))
        extras = raw_extras(m)
        if extras:
            d = with_extras(d, extras)
            n += len(extras)
    return role_of(m), d, n
