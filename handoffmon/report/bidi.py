"""Bidi isolation of model and rule names, so a right-to-left name cannot reorder the text around it."""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import fields, is_dataclass, replace
from typing import Any

from handoffmon.refit.result import RefitResult

FSI, PDI = "\u2068", "\u2069"
"""First-strong isolate and pop-directional isolate: the name is laid out on its own."""
_RTL_OR_CONTROL = {"R", "AL", "RLE", "RLO", "LRE", "LRO", "RLI", "LRI", "FSI", "PDF", "PDI"}


def needs_isolation(name: str) -> bool:
    """Whether ``name`` holds right-to-left letters or bidi controls (``A → B`` could read ``B ← A``)."""
    return any(unicodedata.bidirectional(c) in _RTL_OR_CONTROL for c in name)


def isolate(name: str) -> str:
    """``name`` wrapped in FSI … PDI when it needs it, unchanged otherwise."""
    return f"{FSI}{name}{PDI}" if needs_isolation(name) else name


_ATOMS = (int, float, type(None))


def _rename(value: Any, names: Mapping[str, str]) -> Any:
    """``value`` with every string in ``names`` replaced, through dataclasses, mappings and
    sequences; what holds no such string is returned as is (the same object)."""
    if isinstance(value, str):
        return names.get(value, value)
    if isinstance(value, _ATOMS):
        return value
    if isinstance(value, dict):
        items = [(_rename(k, names), _rename(v, names)) for k, v in value.items()]
        same = all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items(), strict=True))
        return value if same else dict(items)
    if isinstance(value, (list, tuple, Sequence)) and not isinstance(value, (bytes, bytearray)):
        renamed = [_rename(v, names) for v in value]
        if all(a is b for a, b in zip(renamed, value, strict=True)):
            return value
        return tuple(renamed) if isinstance(value, tuple) else renamed
    if is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in fields(value):
            old = getattr(value, f.name)
            new = _rename(old, names)
            if new is not old:
                changes[f.name] = new
        return replace(value, **changes) if changes else value
    return value


def isolated(
    result: RefitResult, truth: Mapping[str, Any] | None
) -> tuple[RefitResult, Mapping[str, Any] | None]:
    """The refit and truth with every model and rule name that needs it isolated (FSI … PDI).

    Names come from router deployments and config, i.e. from whoever set them up; a name
    carrying U+202E (right-to-left override) without its terminator would otherwise flip
    "prefix → suffix" in every table and tooltip it appears in. A refit without such names
    is returned as is.
    """
    names = {m for f in result.rules.values() for m in f.models} | {
        n for f in result.rules.values() for p in f.pairs for n in (p.prefix_model, p.model)
    }
    names |= set(result.rules) | set(result.excluded_models) | set(result.excluded_rules)
    if truth is not None:
        names |= set((truth.get("models") or {}).keys())
    mapping = {n: isolate(n) for n in names if needs_isolation(n)}
    if not mapping:
        return result, truth
    # walking the records, not a to_dict/from_dict round trip: that took 3.3 s of a K = 100
    # report's 3.8 s as soon as one name was Arabic or Hebrew
    renamed: RefitResult = _rename(result, mapping)
    return renamed, (_rename(dict(truth), mapping) if truth is not None else None)
