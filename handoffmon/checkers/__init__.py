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
from handoffmon.checkers.extracted import CLEAR, ExtractedMemory, FingerprintMemory
from handoffmon.checkers.request_rules import RequestRulePolicy, RequestRuleRejected
from handoffmon.checkers.rules import METADATA_KEY, Rule, RuleSet, Scope

__all__ = [
    "CLEAR",
    "METADATA_KEY",
    "CheckContext",
    "CheckFn",
    "CheckOutcome",
    "Checker",
    "CheckerRegistry",
    "CheckerSpec",
    "ExtractedMemory",
    "FingerprintMemory",
    "ParamError",
    "Params",
    "RequestRulePolicy",
    "RequestRuleRejected",
    "Rule",
    "RuleSet",
    "Scope",
    "default_registry",
]
