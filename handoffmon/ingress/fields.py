"""Reading fields the same way from JSON dicts and SDK objects (OpenAI, LiteLLM)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EMPTY: Mapping[str, Any] = {}


_IS_MAPPING: dict[type, bool] = {}
"""type → ``isinstance(obj, Mapping)`` (an ABC check costs ~1 µs; the request path asks it
for every absent field of an SDK response). Bounded by the number of response classes."""


def _is_mapping(obj: Any) -> bool:
    t = type(obj)
    known = _IS_MAPPING.get(t)
    if known is None:
        known = isinstance(obj, Mapping)
        if len(_IS_MAPPING) < 1024:
            _IS_MAPPING[t] = known
    return known


def get(obj: Any, name: str) -> Any:
    """``obj[name]`` for a dict, ``obj.name`` for an SDK object (``None`` when absent)."""
    if type(obj) is dict:
        return obj.get(name)
    value = getattr(obj, name, None)
    if value is None and _is_mapping(obj):
        return obj.get(name)
    return value


def hidden_params(obj: Any) -> Mapping[str, Any]:
    """LiteLLM's ``_hidden_params`` of a response, stream wrapper or chunk ({} when absent)."""
    hp = getattr(obj, "_hidden_params", None)
    if hp is None and isinstance(obj, Mapping):
        hp = obj.get("_hidden_params")
    return hp if isinstance(hp, Mapping) else EMPTY


MAX_TOKENS = (1 << 63) - 1
"""The largest token count read (int64, what OTLP and most stores can hold)."""


def token_count(value: Any) -> int | None:
    """A usage field as a token count: an ``int`` in ``0..MAX_TOKENS``; ``None`` for anything
    else (absent, a float, a bool, a negative or a huge number a broken or hostile upstream
    sent: the turn's span carries it as ``gen_ai.usage.*_tokens``, and OTLP cannot encode an
    integer past int64: protobuf raises ``ValueError: Value out of range``)."""
    return value if type(value) is int and 0 <= value <= MAX_TOKENS else None


UNREADABLE = "\ufffd"
"""What :func:`text_of` reads a value as when ``str()`` cannot (the replacement character)."""


def text_of(value: Any) -> str:
    """``str(value)`` of a value a JSON body may hold anywhere, total: a value nested past the
    recursion limit (orjson reads 1,024 levels) or an integer past Python's digit limit reads
    as :data:`UNREADABLE` instead of raising out of a reader that never raises. The same value
    on both sides of a turn (a reply, and the history sending it back) reads alike."""
    try:
        return str(value)
    except (RecursionError, ValueError):
        return UNREADABLE
