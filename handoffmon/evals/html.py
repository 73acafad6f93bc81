"""HTML pages for eval results, drawn with the report renderer (``handoffmon.report``)."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from html import escape
from typing import Any

from handoffmon.evals.results import CurvePoint, EvalResult

MATRIX_NOTE = (
    "Offline switch matrix: every episode ran in every cell (prefix turns by A, the rest by B), so "
    "delta(A->B) = mean over episodes of s(A->B) - s(B->B) is a paired contrast with paired BCa intervals."
)


def matrix_report(result: Any, *, title: str = "handoffmon — eval switch matrix") -> str:
    """The refit report page (Δ heatmap, π/σ bars) for a ``SwitchMatrixResult``."""
    from handoffmon.refit.result import RefitResult
    from handoffmon.report import render_report

    doc = RefitResult(
        created_at=result.created_at,
        source=result.source,
        observational=False,
        note=MATRIX_NOTE,
        rules={result.fit.rule: result.fit},
        confidence=result.confidence,
        min_n=2,
    )
    run = {"episodes": result.n_episodes, "resamples": result.resamples, "models": len(result.fit.models)}
    return render_report(doc, run=run, title=title)


def _series(points: list[CurvePoint], depths: list[int], color: str, name: str) -> Any:
    from handoffmon.report import svg

    by = {p.depth: p for p in points}
    nan = math.nan
    return svg.Series(
        name=name,
        color=color,
        observed=[by[d].adherence if d in by else nan for d in depths],
        low=[by[d].ci_low if d in by else nan for d in depths],
        high=[by[d].ci_high if d in by else nan for d in depths],
        fitted=[nan for _ in depths],
        n=[by[d].n if d in by else 0 for d in depths],
    )


def _pct(x: Any) -> str:
    return f"{100 * x:.1f}%" if isinstance(x, (int, float)) and math.isfinite(x) else "–"


def _num(x: Any) -> str:
    return f"{x:.4f}" if isinstance(x, (int, float)) and math.isfinite(x) else "–"


def _pressure_table(result: EvalResult) -> str:
    """Table of the pressure-script Markov fits ('' when there are none)."""
    pressure = "".join(
        f"<tr><td>{escape(f['script'])}</td><td>{escape(f['model'])}</td>"
        f"<td>{_pct(f['first_turn_accuracy'])}</td><td>{_pct(f['stationary'])} "
        f"[{_pct(f['stationary_ci'][0])}, {_pct(f['stationary_ci'][1])}]</td>"
        f"<td>{_pct(f['p_tf'])}</td><td>{_pct(f['p_ft'])}</td><td>{_num(f['log_loss'])}</td>"
        f"<td>{_num(f['mse'])}</td><td>{f['n_train']}/{f['n_val']}</td></tr>"
        for f in result.pressure
    )
    return (
        '<table class="markov"><thead><tr><th>pressure script</th><th>model</th><th>turn-1 acc.</th>'
        "<th>stationary acc.</th><th>p<sub>TF</sub></th><th>p<sub>FT</sub></th><th>log loss</th>"
        f"<th>MSE</th><th>train/val runs</th></tr></thead><tbody>{pressure}</tbody></table>"
        if pressure
        else ""
    )


def eval_report(result: EvalResult, *, title: str = "handoffmon — drift eval") -> str:
    """One page: per rule and model, adherence by checkpoint depth with Wilson intervals."""
    from handoffmon.report import svg
    from handoffmon.report.assets import CSS, SCRIPT

    pooled: dict[tuple[str, str], list[CurvePoint]] = defaultdict(list)
    for c in result.curves:
        if c.script == "*":
            pooled[(c.rule, c.model)].append(c)
    charts = []
    for i, ((rule, model), pts) in enumerate(sorted(pooled.items())):
        depths = sorted({p.depth for p in pts})
        color = svg.PALETTE[i % len(svg.PALETTE)]
        chart = svg.depth_curves(
            [str(d) for d in depths], _series(pts, depths, color, f"{rule} · {model}"), y_min=0.0
        )
        charts.append(f'<div class="card">{chart}</div>')
    rows = "".join(
        f"<tr><td>{escape(s['id'])}</td><td>{escape(s['kind'])}</td><td>{s['length']}</td>"
        f"<td>{escape(', '.join(map(str, s['checkpoints'])))}</td>"
        f"<td>{escape(', '.join(map(str, s['derails'])))}</td>"
        f"<td>{escape(', '.join(s['rules']))}</td></tr>"
        for s in result.scripts
    )
    pressure_table = _pressure_table(result)
    verdicts = " · ".join(f"{escape(k)} {v}" for k, v in sorted(result.verdicts.items()))
    created = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(result.created_at))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title><style>{CSS}</style></head>
<body><header><div class="wrap"><h1>{escape(title)}</h1>
<p class="meta">{escape(created)} · {escape(result.database)} · models {escape(", ".join(result.models))}
 · checkpoint verdicts: {verdicts}</p></div></header>
<main class="wrap">
<p class="note">Adherence per checkpoint depth over runs (x axis: depth), pooled over scripts, with
{result.confidence:.0%} Wilson intervals; not_applicable and error verdicts are left out.</p>
<div class="curves">{"".join(charts)}</div>
<table class="markov"><thead><tr><th>script</th><th>kind</th><th>turns</th><th>checkpoints</th>
<th>derails</th><th>rules</th></tr></thead><tbody>{rows}</tbody></table>
{pressure_table}
</main><script>{SCRIPT}</script></body></html>
"""
