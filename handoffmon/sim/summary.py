"""Terminal summary of a demo run: estimates beside the planted truth."""

from __future__ import annotations

import math

from handoffmon.refit.result import ALL_RULES, RuleFit
from handoffmon.sim.demo import DemoOutcome
from handoffmon.sim.truth import Truth

MIN_SHOWN = 20
"""Depth buckets with fewer checks print as ``·`` (too noisy to read)."""


def _pp(x: float, width: int = 6) -> str:
    return f"{'–':>{width}}" if not math.isfinite(x) else f"{100 * x:+{width}.1f}"


def _pc(x: float) -> str:
    return "   – " if not math.isfinite(x) else f"{100 * x:5.1f}"


def header(outcome: DemoOutcome, n_models: int) -> str:
    """Run size, handoff sources and timing."""
    s, c = outcome.stats, outcome.counts
    handoffs = sum(n for k, n in c.turns.items() if k.handoff == "true")
    rl = sum(v for k, v in outcome.injected.items() if k.startswith("rate_limit:"))
    to = sum(v for k, v in outcome.injected.items() if k.startswith("timeout:"))
    return (
        f"handoffmon demo: {s.conversations:,} conversations, {s.turns:,} turns through a litellm.Router "
        f"with {n_models} deployments in {outcome.elapsed_s:.1f} s\n"
        f"  handoff turns {handoffs:,} ({100 * handoffs / max(c.total_turns, 1):.0f}%): "
        f"{s.route_changes:,} routing changes, {s.fallbacks:,} router fallbacks "
        f"(injected {rl} rate limits, {to} timeouts); {s.streamed:,} streamed; "
        f"{s.failed_turns} turns failed after all fallbacks"
    )


def depth_table(fit: RuleFit, truth: Truth) -> str:
    """Observed adherence by depth bucket (all rules), fitted and planted stationary."""
    models = list(truth.models)
    buckets = next(iter(fit.curves.values())).buckets if fit.curves else ()
    lines = [
        f"Adherence by depth (all rules; %; · = under {MIN_SHOWN} checks): observed per bucket, "
        "Markov stationary [planted, mean over rules]",
        "  model   " + "".join(f"{b:>7}" for b in buckets) + "   stationary",
    ]
    for m in models:
        c = fit.curves.get(m)
        if c is None:
            continue
        mk = fit.markov_same_author.get(m)
        planted = sum(truth.models[m].stationary.values()) / len(truth.rules)
        stat = f"{_pc(mk.stationary)} [{_pc(planted).strip()}]" if mk else "–"
        cells = "".join(
            f"{_pc(v):>7}" if n >= MIN_SHOWN else f"{'·':>7}" for v, n in zip(c.adherence, c.n, strict=True)
        )
        lines.append(f"  {m:<8}{cells}   {stat}")
    return "\n".join(lines)


def delta_matrix(fit: RuleFit, truth: Truth) -> str:
    """Δ(A→B) in pp with significance marks, planted μ + π_A + σ_B in brackets."""
    models = list(truth.models)
    lines = [
        "Handoff effect Δ(A→B), pp (rows: prefix A, columns: suffix B; * significant; [planted])",
        "  A \\ B   " + "".join(f"{m:>15}" for m in models),
    ]
    for a in models:
        row = []
        for b in models:
            if a == b:
                row.append(f"{'baseline':>15}")
                continue
            p = fit.pair(a, b)
            est = _pp(p.delta, 5) + ("*" if p and p.significant else " ") if p and p.observed else "    – "
            row.append(f"{est} [{_pp(truth.delta(a, b), 5).strip():>5}]".rjust(15))
        lines.append(f"  {a:<8}" + "".join(row))
    return "\n".join(lines)


def ranked_scores(fit: RuleFit, truth: Truth, z: float = 1.96) -> str:
    """π and σ ranked, with intervals, beside the planted values."""
    lines = ["Prefix influence π (ranked)                   Suffix susceptibility σ (ranked)"]
    pis = sorted(fit.models, key=lambda m: fit.models[m].prefix_influence)
    sgs = sorted(fit.models, key=lambda m: fit.models[m].suffix_susceptibility)
    for a, b in zip(pis, sgs, strict=True):
        sa, sb = fit.models[a], fit.models[b]
        pa = truth.models[a].influence if a in truth.models else math.nan
        pb = truth.models[b].susceptibility if b in truth.models else math.nan
        half = 100 * z * sa.prefix_influence_se
        left = f"  {a:<8}{_pp(sa.prefix_influence)} ± {half:4.1f}  [{_pp(pa).strip()}]"
        right = f"{b:<8}{_pp(sb.suffix_susceptibility)} ± {100 * z * sb.suffix_susceptibility_se:4.1f}"
        lines.append(f"{left:<46}{right}  [{_pp(pb).strip()}]")
    return "\n".join(lines)


def stationary_table(outcome: DemoOutcome, truth: Truth) -> str:
    """Per (model, rule) stationary adherence with its interval and the planted value."""
    checks = {(c.model, c.rule): c for c in outcome.recovery.stationary}
    lines = ["Stationary adherence per rule (%; same-author chains): estimate [interval] planted, ✓ = inside"]
    lines.append("  model   " + "".join(f"{r[:24]:>27}" for r in truth.rules))
    for m in truth.models:
        cells = []
        for r in truth.rules:
            c = checks.get((m, r))
            cells.append(
                f"{'–':>27}"
                if c is None
                else f"{_pc(c.estimate)} [{_pc(c.ci_low).strip()}-{_pc(c.ci_high).strip()}] "
                f"{_pc(c.planted).strip()}{'✓' if c.covered else '✗'}".rjust(27)
            )
        lines.append(f"  {m:<8}" + "".join(cells))
    return "\n".join(lines)


def recovery_line(outcome: DemoOutcome) -> str:
    """One line: how well the refit recovered what was planted."""
    r = outcome.recovery
    inside = sum(c.covered for c in r.stationary)
    return (
        f"Recovery: Pearson(π) {r.pearson_pi:.3f}, Pearson(σ) {r.pearson_sigma:.3f}, "
        f"Pearson(Δ) {r.pearson_delta:.3f}; planted stationary inside its interval for "
        f"{inside}/{len(r.stationary)} (model, rule) chains"
    )


def render_summary(outcome: DemoOutcome, truth: Truth) -> str:
    """The whole terminal summary."""
    fit = outcome.result.rules[ALL_RULES]
    parts = [
        header(outcome, len(truth.models)),
        depth_table(fit, truth),
        delta_matrix(fit, truth),
        ranked_scores(fit, truth),
        stationary_table(outcome, truth),
        recovery_line(outcome),
    ]
    return "\n\n".join(parts)
