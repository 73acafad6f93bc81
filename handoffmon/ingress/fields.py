"""Reading fields the same way from JSON dicts and SDK objects (OpenAI, LiteLLM)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EMPTY: Mapping[str, Any] = {}


def get(obj: Any, name: str) -> Any:
    """``obj[name]`` for a dict, ``obj.name`` for an SDK object (``None`` when absent)."""
    if type(obj) is dict:
        return obj.get(name)
    value = getattr(obj, name, None)
    if value is None and isinstance(obj, Mapping):
        return obj.get(name)
    return value


def hidden_params(obj: Any) -> Mapping[str, Any]:
    """LiteLLM's ``_hidden_params`` of a response, stream wrapper or chunk ({} when absent)."""
    hp = getattr(obj, "_hidden_params", None)
    if hp is None and isinstance(obj, Mapping):
        hp = obj.get("_hidden_params")
    return hp if isinstance(hp, Mapping) else EMPTY
