"""A default rule pack: generic production rules worth running on any assistant reply."""

from __future__ import annotations

from handoffmon.config import RuleConfig


def default_rule_pack(*, languages: tuple[str, ...] = ("en",)) -> tuple[RuleConfig, ...]:
    """Starter rules (copy them into your config and adapt): no AI disclaimers or canned refusals,
    no leaked template placeholders, a non-empty and bounded reply, the expected language.

    Args:
        languages: allowed reply languages; empty to leave the language rule out.
    """
    rules = [
        RuleConfig(
            name="no_ai_disclaimer",
            check="keywords_absent",
            params={"keywords": ["as an ai", "as a language model", "as an ai language model"]},
        ),
        RuleConfig(
            name="no_canned_refusal",
            check="regex_must_not_match",
            params={
                "pattern": r"(?i)\bI(?: am|'m) (?:sorry|afraid),? (?:but )?I can(?:not|'t) "
                r"(?:help|assist|comply)"
            },
        ),
        RuleConfig(
            name="no_placeholder_leak",
            check="regex_must_not_match",
            params={"pattern": r"\{\{[^{}\n]{0,80}\}\}|\[(?:INSERT|YOUR|PLACEHOLDER)[^\]\n]{0,80}\]"},
        ),
        RuleConfig(name="not_empty", check="length", params={"unit": "words", "min": 1}),
        RuleConfig(name="bounded_length", check="length", params={"unit": "words", "max": 2000}),
    ]
    if languages:
        rules.append(
            RuleConfig(name="reply_language", check="language", params={"languages": list(languages)})
        )
    return tuple(rules)
