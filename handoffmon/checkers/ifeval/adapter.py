"""IFEval instructions as registry checkers (``ifeval:<id>`` strict, ``ifeval_loose:<id>`` loose)."""

from __future__ import annotations

from handoffmon.checkers.base import CheckerSpec


def ifeval_specs() -> list[CheckerSpec]:
    """One spec per instruction id and mode (filled in by the instruction library)."""
    return []
