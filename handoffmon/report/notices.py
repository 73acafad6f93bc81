"""The report's warning banners: routing that follows verdicts, models and rules left out of the fit."""

from __future__ import annotations

import math
from html import escape

from handoffmon.refit.result import ALL_RULES, RefitResult, RuleFit

_LISTED = 20
"""Names listed in the "left out of the fit" banner (the page stays bounded in size)."""


def _ratio(fit: RuleFit) -> str:
    lo, hi = fit.handoff_after_fail_ci
    if not math.isfinite(fit.handoff_after_fail_ratio):
        return "n/a"
    interval = f" [{lo:.2f}, {hi:.2f}]" if math.isfinite(lo) and math.isfinite(hi) else ""
    return f"{fit.handoff_after_fail_ratio:.2f}×{interval}"


def _rule_name(rule: str) -> str:
    return "all rules" if rule == ALL_RULES else rule


def rule_warning(fit: RuleFit) -> str:
    """A banner at the top of a rule's tab when its refit flags verdict routing (else empty)."""
    if not fit.verdict_routing:
        return ""
    return (
        '<div class="banner warn" role="alert"><b>Verdict routing:</b> handoffs followed failed checks '
        f"{escape(_ratio(fit))} as often as passed ones, so Δ and the handoff risks of this tab are biased "
        "negative. Confirm with shadow continuation before acting on them.</div>"
    )


def page_warnings(result: RefitResult) -> str:
    """Banners under the title: rules flagged for verdict routing, models and rules not fitted."""
    out = []
    flagged = [r for r, f in result.rules.items() if f.verdict_routing]
    if flagged:
        listed = ", ".join(escape(_rule_name(r)) for r in sorted(flagged))
        out.append(
            '<div class="banner warn" role="alert"><b>Verdict routing flagged</b> '
            f"({listed}): the router hands off after failed checks; the Δ shown there is biased "
            "negative (see the note below).</div>"
        )
    for what, names in (("models", result.excluded_models), ("rules", result.excluded_rules)):
        if names:
            shown = ", ".join(escape(n) for n in names[:_LISTED])
            if len(names) > _LISTED:
                shown += f" and {len(names) - _LISTED} more"
            noun = what if len(names) > 1 else what[:-1]
            out.append(
                f'<div class="banner" role="status"><b>{len(names)} {noun} left out of the fit</b> '
                f"(refit.max_{what}): {shown}. Nothing on this page covers them.</div>"
            )
    return "".join(out)
