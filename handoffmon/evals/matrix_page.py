"""The switch-matrix page: what a matrix has (Δ heatmap, π/σ, pairs with p-values, cell means), nothing else.

A matrix has no depth curves and no Markov chains, so the refit report's cards for those
would be empty; this page draws only the matrix's own results with the report's SVG parts.
"""

from __future__ import annotations

import math
import time
from html import escape
from typing import Any

from handoffmon.report import svg

MATRIX_NOTE = (
    "Offline switch matrix: every episode ran in every cell (prefix turns by A, the rest by B), so "
    "Δ(A→B) = mean over episodes of s(A→B) − s(B→B) is a paired contrast with paired BCa intervals "
    "(scripts resampled as a level when there are several). ★ = significant after Benjamini–Hochberg "
    "over the matrix's pairs. Models are named by the author that answered, as production names them."
)


def _p(x: float) -> str:
    return f"{x:.3g}" if svg.finite(x) else "–"


def _heatmap(fit: Any, models: list[str]) -> str:
    cells: dict[tuple[str, str], svg.HeatCell] = {}
    for p in fit.pairs:
        if not p.observed:
            continue
        tip = (
            f"{p.prefix_model} → {p.model}: Δ {svg.pct(p.delta, 1, True)} pp "
            f"[{svg.pct(p.ci_low, 1, True)}, {svg.pct(p.ci_high, 1, True)}], n={p.n}; "
            f"p {_p(p.p_value)}, BH-adjusted {_p(p.p_adjusted)}"
        )
        cells[(p.prefix_model, p.model)] = svg.HeatCell(
            p.delta, svg.pct(p.delta, 0, True), tip, True, p.significant
        )
    vals = [abs(p.delta) for p in fit.pairs if p.observed and svg.finite(p.delta)]
    scale = min(0.4, max([0.05, *vals]))
    return (
        svg.heatmap(models, models, cells, scale) + f'<div class="legend-row">{svg.legend_scale(scale)}</div>'
    )


def _bars(fit: Any, models: list[str], z: float) -> str:
    charts = []
    for attr, title in (
        ("prefix_influence", "prefix influence π"),
        ("suffix_susceptibility", "suffix susceptibility σ"),
    ):
        bars = []
        for m in sorted((m for m in models if m in fit.models), key=lambda m: getattr(fit.models[m], attr)):
            v, se = getattr(fit.models[m], attr), getattr(fit.models[m], f"{attr}_se")
            bars.append(
                svg.Bar(
                    m,
                    v,
                    v - z * se,
                    v + z * se,
                    None,
                    f"{m}: {svg.pct(v, 1, True)} pp ± {svg.pct(z * se, 1)}",
                )
            )
        charts.append(svg.interval_bars(bars, title=title))
    return f'<div class="pair-charts">{"".join(charts)}</div>'


def _pair_table(fit: Any) -> str:
    rows = "".join(
        f'<tr class="{"sig" if p.significant else ""}"><td>{escape(p.prefix_model)} → {escape(p.model)}</td>'
        f"<td>{p.n}</td><td><b>{svg.pct(p.delta, 1, True)}</b> <span class='ci'>"
        f"[{svg.pct(p.ci_low, 1, True)}, {svg.pct(p.ci_high, 1, True)}]</span></td>"
        f"<td>{_p(p.p_value)}</td><td>{_p(p.p_adjusted)}</td>"
        f"<td>{'★' if p.significant else ''}</td></tr>"
        for p in sorted((p for p in fit.pairs if p.observed), key=lambda p: p.delta)
    )
    return (
        '<table class="markov"><tr><th>pair</th><th>episodes</th><th>Δ (pp) [interval]</th><th>p</th>'
        f"<th>p (BH)</th><th>significant</th></tr>{rows}</table>"
    )


def _cell_table(result: Any) -> str:
    rows = "".join(
        f"<tr><td>{escape(c.prefix_model)} → {escape(c.model)}</td><td>{c.n}</td><td>{svg.pct(c.mean, 1)} "
        f"<span class='ci'>[{svg.pct(c.ci_low, 1)}, {svg.pct(c.ci_high, 1)}]</span></td></tr>"
        for c in result.cells
    )
    return f'<table class="markov"><tr><th>cell</th><th>episodes</th><th>mean score</th></tr>{rows}</table>'


def _kpis(result: Any) -> str:
    fit = result.fit
    observed = [p for p in fit.pairs if p.observed]
    items = [
        ("mean handoff effect μ", f"{svg.pct(fit.mu, 1, True)} pp"),
        (f"significant at FDR {result.fdr:g}", f"{sum(p.significant for p in observed)} / {len(observed)}"),
        ("decomposition R²", f"{fit.r2:.2f}" if svg.finite(fit.r2) else "–"),
        ("episodes · scripts", f"{result.n_episodes} · {result.clusters}"),
    ]
    return (
        '<div class="kpis">'
        + "".join(
            f'<div class="kpi"><div class="kpi-v">{escape(v)}</div><div class="kpi-k">{escape(k)}</div></div>'
            for k, v in items
        )
        + "</div>"
    )


def matrix_report(result: Any, *, title: str = "handoffmon — eval switch matrix") -> str:
    """One HTML page for a ``SwitchMatrixResult``."""
    from statistics import NormalDist

    from handoffmon.report.assets import CSS, SCRIPT

    fit = result.fit
    models = sorted(set(fit.models) | {p.model for p in fit.pairs} | {p.prefix_model for p in fit.pairs})
    z = NormalDist().inv_cdf(0.5 + result.confidence / 2)
    created = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(result.created_at))
    authors = " · ".join(f"{escape(m)} → {escape(a)}" for m, a in result.authors.items()) or "–"
    dropped = (
        f'<p class="note warn">{result.off_author_episodes} episode cell(s) dropped: a router fallback gave '
        "part of them to another author.</p>"
        if result.off_author_episodes
        else ""
    )
    empty = (
        ""
        if any(p.observed for p in fit.pairs)
        else (
            f'<p class="note warn">No pair has {result.min_n} paired episodes yet: add runs or scripts.</p>'
        )
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title><style>{CSS}
tr.sig td{{font-weight:600}}</style></head>
<body>{svg.HATCH_DEFS}<header><div class="wrap"><h1>{escape(title)}</h1>
<p class="meta">{escape(created)} · source {escape(result.source)} · requested → author: {authors}
 · {result.resamples} resamples · min n {result.min_n} · {math.floor(result.confidence * 100)}% intervals</p>
</div></header>
<main class="wrap"><p class="note">{escape(MATRIX_NOTE)}</p>{dropped}{empty}
{_kpis(result)}
<div class="grid two">
  <div class="card" id="delta"><h2>Handoff effect Δ(A→B)</h2><p class="sub">final-turn score after A's prefix
  minus B's own, paired per episode</p>{_heatmap(fit, models)}</div>
  <div class="card" id="scores"><h2>Who hurts, who suffers</h2><p class="sub">Δ(A→B) ≈ μ + π<sub>A</sub> +
  σ<sub>B</sub></p>{_bars(fit, models, z)}</div>
</div>
<div class="grid two">
  <div class="card" id="pairs"><h2>Pairs</h2>{_pair_table(fit)}</div>
  <div class="card" id="cells"><h2>Cell means</h2>{_cell_table(result)}</div>
</div>
</main><footer class="wrap">handoffmon switch matrix · self-contained page, no network</footer>
<script>{SCRIPT}</script></body></html>
"""
