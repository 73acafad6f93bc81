"""Checkers: programmatic rules run on every reply (contract, registry, rules, IFEval family)."""

from __future__ import annotations

from handoffmon.checkers.base import (
    CheckContext,
    Checker,
    CheckerRegistry,
    CheckerSpec,
    CheckFn,
    CheckOutcome,
    ParamError,
    Params,
)
from handoffmon.checkers.builtin import default_registry
from handoffmon.checkers.rules import METADATA_KEY, Rule, RuleSet, Scope

__all__ = [
    "METADATA_KEY",
    "CheckContext",
    "CheckFn",
    "CheckOutcome",
    "Checker",
    "CheckerRegistry",
    "CheckerSpec",
    "ParamError",
    "Params",
    "Rule",
    "RuleSet",
    "Scope",
    "default_registry",
]
