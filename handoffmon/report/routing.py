"""The report's "Adherence saved by reordering" section (risk-aware fallback order vs the router's)."""

from __future__ import annotations

import math
from html import escape

from handoffmon.routing.compare import RoutingComparison


def _pp(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:+.1f} pp"


def _share(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{100 * x:.1f}%"


def reordering_section(cmp: RoutingComparison) -> str:
    """One card: estimate, interval, prediction, both arms' totals and the policy's decisions."""
    rows = "".join(
        f"<tr><td>{name}</td><td>{arm.turns:,}</td><td>{arm.fallback_turns:,}</td>"
        f"<td>{_share(arm.adherence)}</td><td>{arm.fallback_attempts:,}</td><td>{arm.failed_turns:,}</td></tr>"
        for name, arm in (("router's order", cmp.router), ("risk-aware order", cmp.risk))
    )
    decisions = ", ".join(f"{escape(k)} {v:,}" for k, v in sorted(cmp.decisions.items()) if v) or "none"
    level = round(100 * cmp.confidence)
    return (
        '<section class="card" id="reordering"><h2>Adherence saved by reordering</h2>'
        f'<p class="sub">the same {cmp.conversations:,} conversations run twice with the same seeds: the '
        "router's fallback order vs the risk-aware order. Adherence on turns served after a fallback, "
        f"risk-aware minus router, with a {level}% paired conversation-bootstrap interval "
        f"({cmp.resamples:,} resamples).</p>"
        f'<div class="kpis"><div class="kpi"><div class="kpi-v">{_pp(cmp.delta_pp)}</div>'
        f'<div class="kpi-k">estimate [{_pp(cmp.ci_low_pp)}, {_pp(cmp.ci_high_pp)}]</div></div>'
        f'<div class="kpi"><div class="kpi-v">{_pp(cmp.predicted_pp)}</div>'
        '<div class="kpi-k">predicted by the planted effects</div></div>'
        f'<div class="kpi"><div class="kpi-v">{escape(cmp.cost)}</div>'
        '<div class="kpi-k">cost</div></div></div>'
        '<table class="markov"><tr><th>run</th><th>turns</th><th>after a fallback</th>'
        "<th>adherence after fallbacks</th><th>fallback attempts</th><th>failed turns</th></tr>"
        f"{rows}</table><p class='sub'>policy decisions in the risk-aware run: {decisions}</p></section>"
    )
