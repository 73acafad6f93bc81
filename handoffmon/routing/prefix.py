"""The prefix model at request time: the last assistant message's content key, looked up once.

Attribution runs off the request path, so routing cannot wait for it. What routing needs
is one fact — who wrote the last assistant message (and, for ``return_home``, the first)
— and the attribution store already answers it: every recorded reply is also stored
under its content-only fingerprint (``attribution.content_fallback``, on by default).
Hashing one message and one ``get_many`` (pending replies of this process first) costs a
few microseconds with the memory store, whatever the history's length; the chained
fingerprint would hash the whole history. See ``docs/guides/routing.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from handoffmon.attribution import Attributor
from handoffmon.attribution.fingerprint import (
    UNCHAINED_ROLES,
    TextCache,
    content_fingerprint,
    content_key,
    context_digest,
    raw_digest,
)
from handoffmon.ingress.request import ResponseLink
from handoffmon.types import UNKNOWN_MODEL


def _role(message: Any) -> object:
    if type(message) is dict:
        return message.get("role")
    if isinstance(message, str):
        return "user"
    get = getattr(message, "get", None)
    return get("role") if callable(get) else getattr(message, "role", None)


class PrefixLookup:
    """Who wrote a request's last (and first) assistant message, from the attribution store.

    Thread-safe; never raises from ``authors`` on a readable history (store failures are
    absorbed by the attributor's guarded store and read as unknown).

    Args:
        attributor: the monitor's attributor (its pending replies and guarded store).
        text_cache_bytes: bound of this lookup's own folded-text cache.
    """

    __slots__ = ("_attributor", "_min_chars", "_texts", "enabled")

    def __init__(self, attributor: Attributor, *, text_cache_bytes: int = 1_000_000) -> None:
        self._attributor = attributor
        self._min_chars = attributor.min_content_chars
        self._texts = TextCache(text_cache_bytes)
        self.enabled = attributor.content_fallback
        """Content keys are recorded; without them the lookup answers ``(None, None)``."""

    def authors(
        self, messages: Sequence[Any], *, home: bool = False, link: ResponseLink | None = None
    ) -> tuple[str | None, str | None]:
        """(prefix model, home model): authors of the last and the first assistant message.

        ``None`` where there is no such message, it was never recorded, or its key is a
        collision marker. ``home`` is only looked up when asked for. ``link``: a Responses API
        call continuing a history the provider keeps (``previous_response_id`` or a
        ``conversation``, ADR 0011); its assistant messages come before ``messages`` and are
        read from what was recorded under the response id or conversation head.
        """
        if link is not None and (link.previous is not None or link.conversation is not None):
            return self._continued(messages, link, home)
        if not self.enabled:
            return None, None
        last = _last_assistant(messages)
        if last < 0:
            return None, None
        keys = [self._key(messages, last)]
        first = _first_assistant(messages) if home else last
        if first != last:
            keys.append(self._key(messages, first))
        found = self._attributor.lookup(keys)
        prefix = _author(found[0])
        return prefix, (_author(found[1]) if len(found) > 1 else prefix if home else None)

    def _continued(
        self, messages: Sequence[Any], link: ResponseLink, home: bool
    ) -> tuple[str | None, str | None]:
        """:meth:`authors` of a call continuing a stored history: the stored authors (the first
        is the home model only when none was cut by the ``RESPONSE_AUTHORS`` bound), then a
        newer assistant message of the call's own input, if it has one."""
        stored = self._attributor.stored_history(link.previous, link.conversation)
        names = stored.authors if stored is not None else ()
        prefix = _known(names[-1]) if names else None
        first = _known(names[0]) if names and stored is not None and len(names) >= stored.depth else None
        if self.enabled and _last_assistant(messages) >= 0:
            prefix = self.authors(messages)[0]
        return prefix, (first if home else None)

    def _key(self, messages: Sequence[Any], i: int) -> str:
        """The content key ``Attributor.record`` stored for assistant message ``i``."""
        _, d, n = raw_digest(messages[i], self._texts)
        ctx = 0
        if n < self._min_chars:  # short replies are keyed together with the message before them
            for j in range(i - 1, -1, -1):
                role, dj, _ = raw_digest(messages[j], self._texts)
                if role not in UNCHAINED_ROLES:
                    ctx = context_digest(role, dj)
                    break
        return content_key(content_fingerprint(d, n, ctx, self._min_chars))


def _last_assistant(messages: Sequence[Any]) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if _role(messages[i]) == "assistant":
            return i
    return -1


def _first_assistant(messages: Sequence[Any]) -> int:
    for i, m in enumerate(messages):
        if _role(m) == "assistant":
            return i
    return -1


def _known(name: str) -> str | None:
    return None if name == UNKNOWN_MODEL else name


def _author(auth: Any) -> str | None:
    if auth is None or not auth.authors:
        return None
    return str(auth.authors[-1])
