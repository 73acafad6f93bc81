"""Canonical model names: deployment id / provider model string → the name metrics use."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from handoffmon.types import UNKNOWN_MODEL


class ModelNames:
    """Maps raw model identifiers to canonical names (``attribution.canonical_models``).

    Lookups try the raw string, then its lower-case form, then the part after the last
    ``/`` (``openai/gpt-4o`` → ``gpt-4o``). Unmapped names pass through unchanged; the
    exporters bound label cardinality, not this class.

    Args:
        mapping: raw name → canonical name.
    """

    __slots__ = ("_map", "_memo")

    MEMO_MAX = 4096
    """Answers remembered (cleared when full): every turn asks again for the same few names."""

    def __init__(self, mapping: Mapping[str, str] | None = None) -> None:
        self._map: dict[str, str] = {}
        for raw, canonical in (mapping or {}).items():
            self._map[raw] = canonical
            self._map.setdefault(raw.lower(), canonical)
        self._memo: dict[str, str] = {}

    def canonical(self, raw: str | None) -> str:
        """Canonical name of ``raw``; ``None`` or empty → ``unknown``."""
        if not raw:
            return UNKNOWN_MODEL
        memo = self._memo
        found = memo.get(raw) if type(raw) is str else None
        if found is None:
            found = self._lookup(raw)
            if type(raw) is str:
                if len(memo) >= self.MEMO_MAX:
                    memo.clear()
                memo[raw] = found
        return found

    def _lookup(self, raw: str) -> str:
        found = self._map.get(raw)
        if found is not None:
            return found
        found = self._map.get(raw.lower())
        if found is not None:
            return found
        if "/" in raw:
            tail = raw.rsplit("/", 1)[1]
            found = self._map.get(tail) or self._map.get(tail.lower())
            if found is not None:
                return found
        return raw

    def canonical_all(self, raws: Sequence[str | None]) -> tuple[str, ...]:
        """Canonical names of several raw names, in order, consecutive duplicates merged."""
        out: list[str] = []
        canonical = self.canonical
        for raw in raws:
            name = canonical(raw)
            if not out or out[-1] != name:
                out.append(name)
        return tuple(out)

    def __len__(self) -> int:
        return len(self._map)
