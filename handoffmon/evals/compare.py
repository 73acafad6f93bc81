"""``eval compare``: production shapes vs eval results (checkpoint depths, too-clean scripts, missing pairs).

(a) Checkpoint depths: the production session-length percentiles p50/p75/p90/p95 are
    suggested as checkpoint depths; scripts whose longest checkpoint is below p90 are
    noted as shorter than most production sessions.
(b) "Scripts too clean": for each rule and production depth bucket, the eval's
    checkpoint rows whose depth falls in that bucket are pooled (over scripts, runs and
    models, or one model with ``model=``) and compared with production adherence in
    the bucket (pooled over models) by a one-sided two-proportion z-test (pooled
    variance), H1: production < eval. The p-values are Holm-adjusted over every (rule,
    bucket) compared, since one report makes many tests. A (rule, bucket) is flagged
    when the adjusted p < ``alpha`` and the gap is at least ``min_gap`` (so a tiny gap
    on huge production counts is not flagged). Buckets holding no eval checkpoint are
    not compared.
(c) Missing pairs: production handoff pairs with at least ``min_share`` of handoff
    turns that are not a cell of the eval's switch matrix.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from handoffmon.depth import DepthBuckets
from handoffmon.evals.results import EvalResult
from handoffmon.evals.shapes import POOLED, Shapes


@dataclass(frozen=True)
class TooClean:
    """One (rule, depth bucket) where production adheres significantly less than the eval."""

    rule: str
    depth_bucket: str
    eval_depths: tuple[int, ...]
    eval_n: int
    eval_adherence: float
    production_n: int
    production_adherence: float
    gap: float
    z: float
    p_value: float
    flagged: bool


@dataclass(frozen=True)
class Comparison:
    """What ``eval compare`` reports."""

    suggested_checkpoints: tuple[int, ...]
    session_lengths: dict[str, Any]
    eval_max_depth: int
    short_scripts: tuple[str, ...]
    rules: tuple[TooClean, ...]
    missing_pairs: tuple[dict[str, Any], ...]
    alpha: float
    min_gap: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def flagged(self) -> tuple[TooClean, ...]:
        """The (rule, bucket) entries flagged as too clean."""
        return tuple(r for r in self.rules if r.flagged)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (NaN → null)."""
        d = asdict(self)
        d["rules"] = [
            {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
            for r in d["rules"]
        ]
        return {"schema": "handoffmon.eval_compare", "version": 1, **d}


def two_proportion_test(x1: int, n1: int, x2: int, n2: int) -> tuple[float, float]:
    """One-sided pooled z-test of p1 < p2: (z, p-value); (nan, nan) when undefined."""
    from scipy.stats import norm

    if n1 == 0 or n2 == 0:
        return math.nan, math.nan
    pooled = (x1 + x2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:
        return math.nan, 1.0
    z = (x1 / n1 - x2 / n2) / se
    return z, float(norm.cdf(z))


def suggest_checkpoints(sessions: dict[str, Any]) -> tuple[int, ...]:
    """Distinct p50/p75/p90/p95 session lengths (depths ≥ 1), ascending."""
    vals = {int(sessions[k]) for k in ("p50", "p75", "p90", "p95") if sessions.get(k) is not None}
    return tuple(sorted(v for v in vals if v >= 1))


def _eval_by_bucket(
    evals: Sequence[EvalResult], buckets: DepthBuckets, model: str | None
) -> dict[Any, list[int]]:
    """(rule, bucket) → [passes, n, depths…] from the eval's per-script checkpoint curves."""
    acc: dict[Any, list[int]] = defaultdict(lambda: [0, 0])
    depths: dict[Any, set[int]] = defaultdict(set)
    for res in evals:
        for c in res.curves:
            if c.script == POOLED or (model is not None and c.model != model) or c.n == 0:
                continue
            key = (c.rule, buckets.bucket(c.depth))
            acc[key][0] += c.passes
            acc[key][1] += c.n
            depths[key].add(c.depth)
    return {k: [v[0], v[1], *sorted(depths[k])] for k, v in acc.items()}


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (step-down, monotone, capped at 1; NaN stays NaN)."""
    order = sorted((p, i) for i, p in enumerate(p_values) if math.isfinite(p))
    m = len(order)
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for k, (p, i) in enumerate(order):
        running = max(running, min(1.0, (m - k) * p))
        adjusted[i] = running
    return adjusted


def too_clean(
    shapes: Shapes,
    evals: Sequence[EvalResult],
    *,
    alpha: float = 0.05,
    min_gap: float = 0.05,
    model: str | None = None,
) -> list[TooClean]:
    """Every comparable (rule, bucket), flagged where production is significantly below the eval.

    ``p_value`` is Holm-adjusted over all the (rule, bucket) comparisons made.
    """
    buckets = DepthBuckets.from_labels(shapes.buckets)
    raw = []
    for (rule, bucket), (ex, en, *depths) in sorted(_eval_by_bucket(evals, buckets, model).items()):
        prod = shapes.shape(rule, POOLED)
        if prod is None or bucket not in shapes.buckets:
            continue
        i = shapes.buckets.index(bucket)
        px, pn = prod.passes[i], prod.n[i]
        if pn == 0:
            continue
        z, p = two_proportion_test(px, pn, ex, en)
        raw.append((rule, bucket, tuple(depths), en, ex / en, pn, px / pn, ex / en - px / pn, z, p))
    adjusted = holm([r[-1] for r in raw])
    return [
        TooClean(*r[:-1], p_adj, bool(math.isfinite(p_adj) and p_adj < alpha and r[7] >= min_gap))
        for r, p_adj in zip(raw, adjusted, strict=True)
    ]


def matrix_pairs(matrices: Iterable[Any]) -> set[tuple[str, str]]:
    """Off-diagonal (prefix, suffix) cells of switch-matrix results."""
    pairs = set()
    for m in matrices:
        pairs |= {(c.prefix_model, c.model) for c in m.cells if c.prefix_model != c.model}
    return pairs


def compare(
    shapes: Shapes,
    evals: Sequence[EvalResult],
    matrices: Sequence[Any] = (),
    *,
    alpha: float = 0.05,
    min_gap: float = 0.05,
    min_share: float = 0.01,
    model: str | None = None,
) -> Comparison:
    """All three comparisons (see the module docstring)."""
    suggested = suggest_checkpoints(shapes.session_lengths)
    max_depth = max((max(s["checkpoints"]) for r in evals for s in r.scripts if s["checkpoints"]), default=0)
    p90 = shapes.session_lengths.get("p90")
    short = tuple(
        sorted(
            {
                s["id"]
                for r in evals
                for s in r.scripts
                if p90 is not None and s["checkpoints"] and max(s["checkpoints"]) < p90
            }
        )
    )
    notes = []
    covered = matrix_pairs(matrices)
    if not matrices:
        notes.append("no switch-matrix result given: every frequent production pair is listed as missing")
    missing = tuple(
        p
        for p in shapes.handoff_pairs
        if p["share"] >= min_share and (p["prefix_model"], p["model"]) not in covered
    )
    return Comparison(
        suggested,
        dict(shapes.session_lengths),
        max_depth,
        short,
        tuple(too_clean(shapes, evals, alpha=alpha, min_gap=min_gap, model=model)),
        missing,
        alpha,
        min_gap,
        tuple(notes),
    )


def render_text(c: Comparison) -> str:
    """A short human-readable report."""
    lines = [
        "(a) suggested checkpoint depths from production session lengths: "
        f"{', '.join(map(str, c.suggested_checkpoints)) or 'n/a'} "
        f"(eval's deepest checkpoint: {c.eval_max_depth})"
    ]
    if c.short_scripts:
        lines.append(f"    scripts shorter than production p90: {', '.join(c.short_scripts)}")
    lines.append(f"(b) production significantly below eval (alpha={c.alpha}, gap>={c.min_gap}):")
    for r in c.flagged:
        lines.append(
            f"    TOO CLEAN {r.rule} @ {r.depth_bucket}: eval {r.eval_adherence:.3f} (n={r.eval_n}) vs "
            f"production {r.production_adherence:.3f} (n={r.production_n}), p={r.p_value:.2g}"
        )
    if not c.flagged:
        lines.append("    none")
    lines.append("(c) production handoff pairs missing from the eval switch matrix:")
    lines += [
        f"    {p['prefix_model']} -> {p['model']} ({p['share']:.1%} of handoff turns)"
        for p in c.missing_pairs
    ]
    if not c.missing_pairs:
        lines.append("    none")
    lines += [f"note: {n}" for n in c.notes]
    return "\n".join(lines)
