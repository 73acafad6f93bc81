"""The self-contained HTML report of a refit: inline SVG, CSS and a few lines of JS, no network."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from html import escape
from typing import Any

from handoffmon.refit.result import ALL_RULES, RefitResult, RuleFit
from handoffmon.report import svg
from handoffmon.report.assets import CSS, SCRIPT
from handoffmon.report.bidi import isolated
from handoffmon.report.notices import page_warnings, rule_warning
from handoffmon.report.routing import reordering_section
from handoffmon.report.switch_costs import switch_cost_card
from handoffmon.routing.compare import RoutingComparison


def _utc(ts: float) -> str:
    """``ts`` as a UTC minute, or ``time unknown`` for what no clock can show (NaN, ±1e20: a
    damaged document, which ``time.gmtime`` would raise on)."""
    try:
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))
    except (OverflowError, OSError, ValueError):
        return "time unknown"


def _z(confidence: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + confidence / 2)


def _models(fit: RuleFit) -> list[str]:
    names = set(fit.models) | {p.model for p in fit.pairs} | {p.prefix_model for p in fit.pairs}
    return sorted(names)


MAX_SHOWN_MODELS = 30
"""Models drawn in a tab's charts: the pair charts grow as K², so past this the page would
run to megabytes per rule (K = 40: 3.8 MiB for 5 fits); the ones with most checked turns."""


def _shown(fit: RuleFit, models: list[str]) -> list[str]:
    if len(models) <= MAX_SHOWN_MODELS:
        return models
    traffic = {m: sum(fit.curves[m].n) if m in fit.curves else 0 for m in models}
    return sorted(sorted(models, key=lambda m: (-traffic[m], m))[:MAX_SHOWN_MODELS])


def _shown_note(models: list[str], shown: list[str]) -> str:
    if len(shown) == len(models):
        return ""
    return (
        f'<div class="banner" role="status"><b>Showing {len(shown)} of {len(models)} models</b> in the '
        "charts of this tab: those with the most checked turns. The headline numbers and the riskiest "
        "paths cover every model; the refit JSON holds every pair.</div>"
    )


def _scale(fit: RuleFit) -> float:
    vals = [abs(p.delta) for p in fit.pairs if p.observed and svg.finite(p.delta)]
    vals += [abs(p.risk) for p in fit.pairs if svg.finite(p.risk)]
    return min(0.4, max([0.05, *vals]))


def _heatmap(fit: RuleFit, models: list[str], min_n: int) -> str:
    cells: dict[tuple[str, str], svg.HeatCell] = {}
    for p in fit.pairs:
        if p.observed:
            tip = (
                f"{p.prefix_model} → {p.model}: Δ {svg.pct(p.delta, 1, True)} pp "
                f"[{svg.pct(p.ci_low, 1, True)}, {svg.pct(p.ci_high, 1, True)}], n={p.n}; "
                f"fitted risk {svg.pct(p.risk, 1, True)} pp"
            )
            cells[(p.prefix_model, p.model)] = svg.HeatCell(
                p.delta, svg.pct(p.delta, 0, True), tip, True, p.significant
            )
        elif svg.finite(p.risk):
            risk = svg.pct(p.risk, 1, True)
            tip = f"{p.prefix_model} → {p.model}: not observed (n={p.n}); fitted risk {risk} pp"
            cells[(p.prefix_model, p.model)] = svg.HeatCell(
                p.risk, svg.pct(p.risk, 0, True), tip, False, False
            )
        elif p.n > 0:  # handed off, but neither Δ nor a fitted risk can be estimated yet
            tip = f"{p.prefix_model} → {p.model}: not estimable (n={p.n}, below min n {min_n})"
            cells[(p.prefix_model, p.model)] = svg.HeatCell(float("nan"), "n/e", tip, False, False)
    scale = _scale(fit)
    return (
        svg.heatmap(models, models, cells, scale)
        + f'<div class="legend-row">{svg.legend_scale(scale)}<span class="hint">★ interval excludes 0 · '
        "(parentheses) = never observed, fitted μ + π<sub>A</sub> + σ<sub>B</sub> shown · n/e = not "
        "estimable yet (too few checked turns)</span></div>" + _sparse_note(fit)
    )


def _sparse_note(fit: RuleFit) -> str:
    """Say why the matrix is empty when no pair has enough checked turns yet."""
    if any(p.observed for p in fit.pairs):
        return ""
    if len(_models(fit)) == 1:
        return (
            '<p class="note warn">One model only: no conversation can change hands, so there is no '
            "handoff effect to estimate. Adherence by depth and the Markov decay below still apply.</p>"
        )
    return (
        '<p class="note warn">No handoff pair has reached the minimum number of checked turns yet; '
        "Δ and π/σ appear once more traffic has been recorded.</p>"
    )


def _planted(truth: Mapping[str, Any] | None, model: str, key: str) -> float | None:
    if not truth:
        return None
    value = truth.get("models", {}).get(model, {}).get(key)
    return float(value) if isinstance(value, (int, float)) else None


def _score_bars(fit: RuleFit, models: list[str], z: float, truth: Mapping[str, Any] | None) -> str:
    charts = []
    for attr, se_attr, key, title in (
        ("prefix_influence", "prefix_influence_se", "prefix_influence", "prefix influence π (as prefix A)"),
        (
            "suffix_susceptibility",
            "suffix_susceptibility_se",
            "suffix_susceptibility",
            "suffix susceptibility σ (as suffix B)",
        ),
    ):
        bars = []
        ranked = sorted(
            (m for m in models if m in fit.models),
            key=lambda m: (not svg.finite(getattr(fit.models[m], attr)), getattr(fit.models[m], attr), m),
        )  # not estimable last: NaN keys would leave the ranking in arbitrary order
        for m in ranked:
            s = fit.models[m]
            v, se = getattr(s, attr), getattr(s, se_attr)
            ref = _planted(truth, m, key)
            tip = (
                f"{m}: {svg.pct(v, 1, True)} pp ± {svg.pct(z * se, 1)} pp (n={s.n})"
                if svg.finite(v)
                else f"{m}: not estimable (n={s.n})"
            )
            if ref is not None:
                tip += f"; planted {svg.pct(ref, 1, True)} pp"
            bars.append(svg.Bar(m, v, v - z * se, v + z * se, ref, tip))
        charts.append(svg.interval_bars(bars, title=title))
    note = '<span class="hint">bars: estimate with interval · ◆ planted truth</span>' if truth else ""
    return f'<div class="pair-charts">{"".join(charts)}</div>{note}'


def _curves(fit: RuleFit, models: list[str], buckets: tuple[str, ...]) -> str:
    out = []
    # y range from well-measured buckets only; sparse deep buckets' wide intervals are clipped
    seen = [
        v
        for c in fit.curves.values()
        for v, n in zip(c.adherence, c.n, strict=True)
        if svg.finite(v) and n >= 30
    ]
    y_min = min(0.6, max(0.0, math.floor((min(seen, default=0.5) - 0.08) * 10) / 10))
    labels = svg.tick_names(models)
    for i, m in enumerate(models):
        c = fit.curves.get(m)
        if c is None:
            continue
        mk = fit.markov.get(m)
        series = svg.Series(
            m,
            svg.PALETTE[i % len(svg.PALETTE)],
            c.adherence,
            c.ci_low,
            c.ci_high,
            c.fitted,
            c.n,
            mk.stationary if mk else float("nan"),
            labels[m],
        )
        out.append(svg.depth_curves(c.buckets or buckets, series, y_min=y_min))
    return (
        '<div class="curves">' + "".join(out) + '</div><span class="hint">dots: observed adherence by depth '
        "with Wilson intervals · line: Markov-implied curve · dashed: stationary adherence</span>"
    )


def _markov_table(
    fit: RuleFit, models: list[str], truth: Mapping[str, Any] | None, rule: str, min_transitions: int
) -> str:
    truth = truth if rule != ALL_RULES else None  # planted stationary adherence is per rule
    head = (
        "<tr><th>model</th><th>p<sub>TF</sub></th><th>p<sub>FT</sub></th><th>stationary</th>"
        "<th>half-life</th><th>log loss</th>"
        + ("<th>planted stationary (✓ inside interval)</th>" if truth else "")
        + "</tr>"
    )
    rows = []
    for m in models:
        mk = fit.markov_same_author.get(m) or fit.markov.get(m)
        if mk is None:
            continue
        planted = ""
        if truth:
            st = truth.get("models", {}).get(m, {}).get("stationary", {})
            val = st.get(rule)
            if val is None:
                planted = "<td>–</td>"
            else:  # a mark, not only a colour: 'outside' must survive colour blindness and print
                inside = mk.stationary_ci[0] <= val <= mk.stationary_ci[1]
                cls, mark = ("ok", "✓") if inside else ("miss", "✗")
                planted = f'<td class="{cls}">{svg.pct(val, 1)} {mark}</td>'
        hl = "∞" if math.isinf(mk.half_life_turns) else f"{mk.half_life_turns:.1f} turns"
        rows.append(
            f"<tr><td>{escape(m)}</td><td>{svg.pct(mk.p_tf, 1)}</td><td>{svg.pct(mk.p_ft, 1)}</td>"
            f"<td><b>{svg.pct(mk.stationary, 1)}</b> <span class='ci'>[{svg.pct(mk.stationary_ci[0], 1)}, "
            f"{svg.pct(mk.stationary_ci[1], 1)}]</span></td><td>{hl}</td><td>{mk.log_loss:.3f}</td>"
            f"{planted}</tr>"
        )
    if not rows:
        return (
            f'<p class="note warn">No model has {min_transitions} transitions out of both states yet; '
            "its chain appears once more traffic has been recorded.</p>"
        )
    return f'<table class="markov">{head}{"".join(rows)}</table>'


def _truth_card(fit: RuleFit, truth: Mapping[str, Any] | None) -> str:
    """Estimated Δ against planted μ + π_A + σ_B (only when a planted truth is given)."""
    if not truth or not isinstance(truth.get("mu"), (int, float)):
        return ""
    points = []
    for p in fit.pairs:
        pa, sb = (
            _planted(truth, p.prefix_model, "prefix_influence"),
            _planted(truth, p.model, "suffix_susceptibility"),
        )
        if p.observed and pa is not None and sb is not None:
            planted = float(truth["mu"]) + pa + sb
            tip = (
                f"{p.prefix_model} → {p.model}: planted {svg.pct(planted, 1, True)} pp, "
                f"estimated {svg.pct(p.delta, 1, True)} pp"
            )
            points.append((planted, p.delta, tip, p.significant))
    if not points:
        return (
            '<div class="card"><h2>Recovered vs planted</h2><p class="note warn">No pair has an estimated Δ '
            "yet, so nothing can be compared with the planted values.</p></div>"
        )
    chart = svg.scatter(points, x_label="planted μ + π(A) + σ(B)", y_label="estimated Δ(A→B)")
    return (
        f'<div class="card"><h2>Recovered vs planted</h2><p class="sub">every observed pair; dashed line = '
        f"perfect recovery; red = significant</p>{chart}</div>"
    )


def _risk_table(fit: RuleFit, z: float, top: int = 6) -> str:
    """The riskiest handoff paths by fitted μ + π_A + σ_B, including pairs never observed."""
    ranked = sorted((p for p in fit.pairs if svg.finite(p.risk)), key=lambda p: p.risk)[:top]
    if not ranked:
        return ""
    rows = "".join(
        f"<tr><td>{escape(p.prefix_model)} → {escape(p.model)}</td>"
        f"<td><b>{svg.pct(p.risk, 1, True)}</b> <span class='ci'>± {_pp(z * p.risk_se)}</span></td>"
        f"<td>{svg.pct(p.delta, 1, True) if p.observed else 'not yet observed'}</td><td>{p.n}</td></tr>"
        for p in ranked
    )
    return (
        '<div class="card"><h2>Riskiest handoff paths</h2><p class="sub">fitted risk μ + π<sub>A</sub> + '
        "σ<sub>B</sub> (pp), also for pairs that have not occurred yet, e.g. an untried fallback</p>"
        '<table class="markov"><tr><th>path</th><th>fitted risk</th><th>observed Δ</th><th>n</th></tr>'
        f"{rows}</table></div>"
    )


def _pp(x: float) -> str:
    """An unsigned width in percentage points (``0.021`` → ``2.1 pp``); NaN → ``–``."""
    return f"{100 * x:.1f} pp" if svg.finite(x) else "–"


def _kpis(fit: RuleFit, z: float, confidence: float) -> str:
    observed = [p for p in fit.pairs if p.observed]
    sig = [p for p in observed if p.significant]
    worst = min(observed, key=lambda p: p.delta, default=None)
    mu_key = "mean handoff effect μ"
    if svg.finite(fit.mu) and svg.finite(fit.mu_se):
        mu_key += f" ({round(100 * confidence)}% ± {_pp(z * fit.mu_se)})"
    items = [
        (mu_key, f"{svg.pct(fit.mu, 1, True)} pp" if svg.finite(fit.mu) else "not estimable"),
        ("pairs significant", f"{len(sig)} / {len(observed)}"),
        (  # adjusted: with few pairs the raw R² of μ + π + σ is near 1 whatever the data
            f"decomposition R² (adjusted, {fit.n_pairs} pairs)",
            f"{fit.r2_adjusted:.2f}" if svg.finite(fit.r2_adjusted) else "– (too few pairs)",
        ),
    ]
    if worst is not None:
        items.append(
            (
                "riskiest observed handoff"
                + (
                    ""
                    if worst.significant
                    else f" (interval includes 0: {svg.pct(worst.ci_low, 0, True)}"
                    f" to {svg.pct(worst.ci_high, 0, True)} pp)"
                ),
                f"{worst.prefix_model} → {worst.model} {svg.pct(worst.delta, 0, True)} pp",
            )
        )
    return (
        '<div class="kpis">'
        + "".join(
            f'<div class="kpi"><div class="kpi-v">{escape(v)}</div><div class="kpi-k">{escape(k)}</div></div>'
            for k, v in items
        )
        + "</div>"
    )


def _handoff_counts(fit: RuleFit) -> dict[tuple[str, str], int]:
    return {(p.prefix_model, p.model): p.n for p in fit.pairs}


def _rule_section(result: RefitResult, rule: str, idx: int, truth: Mapping[str, Any] | None) -> str:
    fit = result.rules[rule]
    every = _models(fit)
    models = _shown(fit, every)
    z = _z(result.confidence)
    hidden = "" if idx == 0 else " hidden"
    unit = "checks (turns × rules)" if rule == ALL_RULES else "checked turns"
    if not every:  # empty axes and chart frames would read as a rendering fault: say why instead
        return f"""
<section class="rule{hidden}" id="rule-{idx}" data-rule="{escape(rule)}" role="tabpanel"
  aria-labelledby="tab-{idx}">
  <div class="banner warn" role="status"><b>No model has a checked turn in this refit</b>: there is
  nothing to chart yet. Refit again once the monitor has counted checked turns.</div>
</section>"""
    markov = _markov_table(fit, models, truth, rule, result.markov_min_transitions)
    return f"""
<section class="rule{hidden}" id="rule-{idx}" data-rule="{escape(rule)}" role="tabpanel"
  aria-labelledby="tab-{idx}">
  {rule_warning(fit)}
  {_shown_note(every, models)}
  {_kpis(fit, z, result.confidence)}
  <div class="grid two">
    <div class="card"><h2>Handoff effect Δ(A→B)</h2>
      <p class="sub">adherence of B after A minus B's own baseline, compared within depth buckets</p>
      {_heatmap(fit, models, result.min_n)}</div>
    <div class="card"><h2>Who hurts, who suffers</h2>
      <p class="sub">Δ(A→B) ≈ μ + π<sub>A</sub> + σ<sub>B</sub>, {int(result.confidence * 100)}% intervals</p>
      {_score_bars(fit, models, z, truth)}</div>
  </div>
  <div class="card"><h2>Adherence by conversation depth</h2>{_curves(fit, models, result.buckets)}</div>
  <div class="grid two">
    <div><div class="card"><h2>Handoffs by pair</h2><p class="sub">{unit} where A wrote the previous
      turn and B this one</p>{svg.bubbles(models, models, _handoff_counts(fit))}</div>
      {_risk_table(fit, z)}</div>
    <div><div class="card"><h2>Markov decay (same-author turns)</h2>
      <p class="sub">two-state chain of pass/fail across turns; stationary = p<sub>FT</sub> /
      (p<sub>TF</sub> + p<sub>FT</sub>)</p>{markov}</div>
      {_truth_card(fit, truth)}</div>
  </div>
  {switch_cost_card(fit, rule, truth)}
</section>"""


MAX_RULE_TABS = 24
"""Rule tabs besides the pooled one (refit.max_rules allows 100, each tab a full set of charts)."""


def _checks(fit: RuleFit) -> int:
    return sum(sum(c.n) for c in fit.curves.values())


def _tab_rules(result: RefitResult) -> tuple[list[str], list[str]]:
    """Tabs in order (pooled first, rules sorted) and the rules left without a tab (fewest checks)."""
    named = [r for r in result.rules if r != ALL_RULES]
    busiest = sorted(named, key=lambda r: (-_checks(result.rules[r]), r))
    kept, left_out = sorted(busiest[:MAX_RULE_TABS]), sorted(busiest[MAX_RULE_TABS:])
    return ([ALL_RULES] if ALL_RULES in result.rules else []) + kept, left_out


def _rules_note(left_out: list[str]) -> str:
    if not left_out:
        return ""
    listed = ", ".join(escape(r) for r in left_out[:20]) + (" …" if len(left_out) > 20 else "")
    return (
        f'<div class="banner" role="status"><b>{len(left_out)} rules without a tab</b> (the '
        f"{MAX_RULE_TABS} with the most checks have one; the pooled tab covers all): {listed}. "
        "Their fits are in the refit JSON.</div>"
    )


def _run_panel(run: Mapping[str, Any] | None) -> str:
    if not run:
        return ""
    cells = "".join(
        f'<div class="kpi small"><div class="kpi-v">{escape(str(v))}</div>'
        f'<div class="kpi-k">{escape(str(k))}</div>'
        "</div>"
        for k, v in run.items()
    )
    return f'<div class="kpis run">{cells}</div>'


def render_report(
    result: RefitResult,
    *,
    truth: Mapping[str, Any] | None = None,
    run: Mapping[str, Any] | None = None,
    title: str = "handoffmon — handoff risk report",
    reordering: RoutingComparison | None = None,
) -> str:
    """One HTML page for a refit: a tab per rule (pooled ``all`` first), every chart inline.

    Args:
        result: the refit to show.
        truth: optional planted truth (``sim.truth.Truth.to_dict()``) drawn as markers.
        run: optional key → value facts about the run (shown under the title).
        title: page title.
        reordering: a risk-aware routing comparison, shown as "Adherence saved by reordering".
    """
    result, truth = isolated(result, truth)
    rules, left_out = _tab_rules(result)
    tabs = "".join(
        f'<button class="tab{" active" if i == 0 else ""}" data-target="rule-{i}" role="tab" id="tab-{i}" '
        f'aria-controls="rule-{i}" aria-selected="{"true" if i == 0 else "false"}">'
        f"{'all rules' if r == ALL_RULES else escape(r)}</button>"
        for i, r in enumerate(rules)
    )
    sections = "".join(_rule_section(result, r, i, truth) for i, r in enumerate(rules))
    created = _utc(result.created_at)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title><style>{CSS}</style></head>
<body>{svg.HATCH_DEFS}
<header><div class="wrap"><h1>{escape(title)}</h1>
<p class="meta">refit {escape(created)} · source {escape(result.source)} · depth buckets
{escape(", ".join(result.buckets))} · min n {result.min_n}</p>{_run_panel(run)}</div></header>
<main class="wrap">
{page_warnings(result)}
<p class="note">{escape(result.note)}</p>
{reordering_section(reordering) if reordering is not None else ""}
{_rules_note(left_out)}
<nav class="tabs" role="tablist">{tabs}</nav>
{sections}
</main>
<footer class="wrap">handoffmon refit schema v{result.version} · self-contained page, no network</footer>
<script>{SCRIPT}</script>
</body></html>
"""
