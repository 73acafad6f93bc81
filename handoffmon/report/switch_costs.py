"""The report's "Switch cost (shadow continuation)" card: experimental and observational side by side."""

from __future__ import annotations

import math
from collections.abc import Mapping
from html import escape
from typing import Any

from handoffmon.refit.result import RuleFit


def _pp(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{100 * x:+.1f}"


def _interval(est: float, lo: float, hi: float) -> str:
    if not math.isfinite(est):
        return "n/a"
    return f"{_pp(est)} [{_pp(lo)}, {_pp(hi)}]"


def _planted(truth: Mapping[str, Any] | None, rule: str) -> dict[tuple[str, str], float]:
    entries = (truth or {}).get("switch_costs") or ()
    return {(e["prefix_model"], e["model"]): float(e["planted"]) for e in entries if e.get("rule") == rule}


def switch_cost_card(fit: RuleFit, rule: str, truth: Mapping[str, Any] | None = None) -> str:
    """One card per rule with shadow pairs (empty string without): per (A → B) the experimental
    switch cost with its interval, the observational s(A→B) − s(A→A) of the same pair, whether
    they disagree, and the planted value when the truth carries one (the demo)."""
    if not fit.switch_costs:
        return ""
    planted = _planted(truth, rule)
    head = "<th>planted</th>" if planted else ""
    rows = []
    for sc in sorted(fit.switch_costs, key=lambda s: (s.prefix_model, s.model)):
        mark = " ✱" if sc.significant else ""
        cells = [
            f"{escape(sc.prefix_model)} → {escape(sc.model)}",
            f"{sc.n_pairs:,}",
            _interval(sc.estimate, sc.ci_low, sc.ci_high) + mark,
            _interval(sc.observational, sc.observational_ci_low, sc.observational_ci_high),
            "yes" if sc.disagree else "",
        ]
        if planted:
            p = planted.get((sc.prefix_model, sc.model), float("nan"))
            cells.append(_pp(p))
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return (
        '<div class="card switch-costs"><h2>Switch cost (shadow continuation)</h2>'
        '<p class="sub">on sampled turns a second model continued the identical history in the '
        "background; experimental = B's minus A's adherence on the same prefixes (pp, paired, "
        "conversation-clustered interval; ✱ significant after FDR), next to the observational "
        "s(A→B) − s(A→A) from ordinary traffic</p>"
        '<table class="markov"><tr><th>A → B</th><th>pairs</th><th>experimental</th>'
        f"<th>observational</th><th>disagree</th>{head}</tr>{''.join(rows)}</table></div>"
    )
