"""The handoffmon rules that check the simulated replies (built-in checkers only)."""

from __future__ import annotations

from typing import Any

from handoffmon.config import RuleConfig
from handoffmon.sim.fleet import Fleet, SimRule

REPLY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["reply"],
    "properties": {"reply": {"type": "string"}},
    "additionalProperties": False,
}
"""Shape the ``json`` rule asks for: ``{"reply": "..."}``."""


def rule_config(rule: SimRule) -> RuleConfig:
    """The handoffmon rule that checks what the writer varies for ``rule``."""
    params: dict[str, Any]
    if rule.kind == "language":
        check, params = "language", {"languages": [str(rule.params.get("language", "es"))]}
    elif rule.kind == "no_commas":
        check, params = "no_commas", {}
    elif rule.kind == "answer_tag":
        check, params = "answer_tag", {}
    elif rule.kind == "max_words":
        check, params = "length", {"unit": "words", "max": int(rule.params.get("max_words", 60))}  # type: ignore[call-overload]
    elif rule.kind == "answer_stability":
        check, params = "answer_flip", {}
    elif rule.kind == "keyword":
        check, params = "keywords_present", {"keywords": [str(rule.params.get("keyword", "ticket"))]}
    else:
        check, params = "json_schema", {"schema": REPLY_SCHEMA}
    return RuleConfig(name=rule.name, check=check, params=params)


def rule_configs(fleet: Fleet) -> list[RuleConfig]:
    """One rule per fleet rule, in fleet order."""
    return [rule_config(r) for r in fleet.rules]
