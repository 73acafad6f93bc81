"""``eval compare``: production shapes vs eval results (checkpoint depths, too-clean scripts, missing pairs).

Both sides are joined on the **author**: the canonical name of the deployment that
answered (after the router's fallbacks), which is what production counts are keyed by
and what eval rows record beside the requested model or group.

(a) Checkpoint depths: the production session-length percentiles p50/p75/p90/p95 are
    suggested as checkpoint depths; scripts whose longest checkpoint is below p90 are
    noted as shorter than most production sessions.
(b) "Scripts too clean": for each rule, author and eval checkpoint depth d, the eval's
    checkpoint rows at d (pooled over scripts and runs) are compared with the same
    author's production adherence moved to depth d within its bucket
    (``depth_match``). One-sided test, H1: production < eval, on Agresti–Caffo
    adjusted proportions (add one pass and one fail to each side) with production's
    variance inflated by its chain's design effect. p-values are Holm-adjusted over
    every depth-matched comparison of the report; a comparison is flagged when the adjusted p <
    ``alpha`` and the gap is at least ``min_gap``. A multi-depth bucket without a
    production Markov fit (a cells CSV) cannot be matched in depth: it is reported,
    never flagged.
(c) Missing pairs: production handoff pairs with at least ``min_share`` of handoff
    turns that are not a cell of the eval's switch matrix (matrix cells are named by
    their authors as well).

Nothing to compare is an error (``NoDataError``), never an empty all-clear.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from handoffmon.depth import DepthBuckets
from handoffmon.errors import InputError, NoDataError
from handoffmon.evals.depth_match import production_at_depth
from handoffmon.evals.results import EvalResult
from handoffmon.evals.shapes import POOLED, Shapes

JOIN_NOTE = (
    "joined on the author: the deployment that answered each turn (after router fallbacks), "
    "named as production names it (attribution.canonical_models)"
)


@dataclass(frozen=True)
class TooClean:
    """One (rule, author, checkpoint depth): eval adherence vs production at that depth.

    Attributes:
        rule: rule name.
        model: the author both sides are joined on.
        depth: the eval checkpoint depth.
        depth_bucket: production's bucket holding ``depth``.
        eval_n: eval checks (runs) at the checkpoint.
        eval_adherence: eval pass share.
        production_n: production checks in the bucket.
        production_bucket_adherence: production pass share over the whole bucket.
        production_adherence: production moved to ``depth`` (bucket + ``depth_shift``).
        depth_shift: the within-bucket adjustment (0 for single-depth buckets).
        depth_matched: False when the bucket spans several depths and no Markov fit
            was available to match them (then never flagged).
        gap: eval_adherence − production_adherence.
        z: test statistic.
        p_value: raw one-sided p-value.
        p_adjusted: Holm-adjusted over the depth-matched comparisons of the report (NaN when unmatched).
        flagged: p_adjusted < alpha, gap ≥ min_gap and depth_matched.
    """

    rule: str
    model: str
    depth: int
    depth_bucket: str
    eval_n: int
    eval_adherence: float
    production_n: int
    production_bucket_adherence: float
    production_adherence: float
    depth_shift: float
    depth_matched: bool
    gap: float
    z: float
    p_value: float
    p_adjusted: float
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
    joined_on: str = "author"
    model: str | None = None
    eval_authors: tuple[str, ...] = ()
    production_models: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    unmatched: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Names only one side has (see ``unmatched_names``): ``eval_authors``, ``production_models``,
    ``eval_rules``, ``production_rules``; ``eval_checkpoints`` production has no checks at
    (``uncompared_checkpoints``); and ``matrix_authors``, switch-matrix authors production has
    neither counts nor handoff pairs for (``unmatched_matrix_authors``); empty lists are left out."""

    @property
    def flagged(self) -> tuple[TooClean, ...]:
        """The comparisons flagged as too clean."""
        return tuple(r for r in self.rules if r.flagged)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (NaN → null)."""
        d = asdict(self)
        d["rules"] = [
            {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
            for r in d["rules"]
        ]
        return {"schema": "handoffmon.eval_compare", "version": 2, **d}


def adjusted_one_sided_test(
    x_low: int, n_low: float, x_high: int, n_high: int, *, shift: float = 0.0, deff: float = 1.0
) -> tuple[float, float]:
    """One-sided test of p_low + shift < p_high: (z, p-value), Agresti–Caffo adjusted.

    ``deff`` inflates the variance of the low side (clustered production turns).
    (nan, nan) when either side is empty.
    """
    from scipy.stats import norm

    if n_low <= 0 or n_high <= 0:
        return math.nan, math.nan
    p1, p2 = (x_low + 1) / (n_low + 2), (x_high + 1) / (n_high + 2)
    var = deff * p1 * (1 - p1) / (n_low + 2) + p2 * (1 - p2) / (n_high + 2)
    z = (p2 - (p1 + shift)) / math.sqrt(var)
    return z, float(norm.sf(z))


def suggest_checkpoints(sessions: dict[str, Any]) -> tuple[int, ...]:
    """Distinct p50/p75/p90/p95 session lengths (depths ≥ 1), ascending."""
    vals = {int(sessions[k]) for k in ("p50", "p75", "p90", "p95") if sessions.get(k) is not None}
    return tuple(sorted(v for v in vals if v >= 1))


def eval_by_author(evals: Sequence[EvalResult]) -> dict[tuple[str, str, int], tuple[int, int]]:
    """(rule, author, depth) → (passes, n) from the pooled-over-scripts checkpoint curves."""
    acc: dict[tuple[str, str, int], list[int]] = defaultdict(lambda: [0, 0])
    for res in evals:
        for c in res.curves:
            if c.script == POOLED and c.n > 0:
                acc[(c.rule, c.author, c.depth)][0] += c.passes
                acc[(c.rule, c.author, c.depth)][1] += c.n
    return {k: (v[0], v[1]) for k, v in acc.items()}


def check_overlap(evals: Sequence[EvalResult], sources: Sequence[str] | None = None) -> None:
    """``InputError`` when two results hold runs of one (database, script, model).

    ``eval_by_author`` adds results up, so the same runs given twice (the same file, or
    two ``eval run`` outputs of one ``--db``) would double n and shrink every p-value.
    """
    names = list(sources) if sources is not None else [f"result #{i + 1}" for i in range(len(evals))]
    seen: dict[tuple[str, str, str], str] = {}
    for res, name in zip(evals, names, strict=True):
        keys = sorted({(res.database, c.script, c.model) for c in res.curves if c.script != POOLED})
        for key in keys:
            if key in seen:
                first = seen[key]
                where = f"{name} is given twice" if first == name else f"{first} and {name} overlap"
                raise InputError(
                    f"{where}: the runs of script {key[1]!r}, model {key[2]!r} from database {key[0]} "
                    "would be counted twice; give each database's runs of a script and model once"
                )
        seen.update(dict.fromkeys(keys, name))


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


def _one(
    shapes: Shapes, buckets: DepthBuckets, rule: str, author: str, depth: int, ex: int, en: int
) -> TooClean | None:
    """The unadjusted comparison of one (rule, author, depth), or None when production has no data."""
    prod = shapes.shape(rule, author)
    if prod is None:
        return None
    bucket = buckets.bucket(depth)
    i = shapes.buckets.index(bucket)
    pn, px = prod.n[i], prod.passes[i]
    if pn == 0:
        return None
    pooled = shapes.shape(rule, POOLED)
    markov = prod.markov or (pooled.markov if pooled is not None else {})
    at = production_at_depth(buckets, prod.n, prod.adherence, depth, markov)
    z, p = adjusted_one_sided_test(px, pn, ex, en, shift=at.shift, deff=at.design_effect)
    return TooClean(
        rule, author, depth, bucket, en, ex / en, pn, px / pn, at.adherence, at.shift, at.matched,
        ex / en - at.adherence, z, p, math.nan, False,
    )  # fmt: skip


def too_clean(
    shapes: Shapes,
    evals: Sequence[EvalResult],
    *,
    alpha: float = 0.05,
    min_gap: float = 0.05,
    model: str | None = None,
) -> list[TooClean]:
    """Every (rule, author, checkpoint depth) both sides have, flagged where production is below the eval."""
    buckets = DepthBuckets.from_labels(shapes.buckets)
    raw = []
    for (rule, author, depth), (ex, en) in sorted(eval_by_author(evals).items()):
        if model is not None and author != model:
            continue
        one = _one(shapes, buckets, rule, author, depth, ex, en)
        if one is not None:
            raw.append(one)
    # only comparisons that can be flagged form the Holm family: an unmatched one would only dilute it
    family = [i for i, r in enumerate(raw) if r.depth_matched]
    adjusted = [math.nan] * len(raw)
    for i, p_adj in zip(family, holm([raw[i].p_value for i in family]), strict=True):
        adjusted[i] = p_adj
    return [
        dataclasses.replace(
            r,
            p_adjusted=p_adj,
            flagged=bool(r.depth_matched and math.isfinite(p_adj) and p_adj < alpha and r.gap >= min_gap),
        )
        for r, p_adj in zip(raw, adjusted, strict=True)
    ]


def read_switch_matrix(data: Any, source: str) -> Any:
    """A ``handoffmon.switch_matrix`` document as ``SwitchMatrixResult``; ``InputError`` naming
    the file and the key for a document of another shape (``SwitchMatrixResult.from_dict``
    checks every value against its field)."""
    from handoffmon.refit.result import SwitchMatrixResult

    return SwitchMatrixResult.from_dict(data, source=source)


def matrix_pairs(matrices: Iterable[Any]) -> set[tuple[str, str]]:
    """Off-diagonal (prefix, suffix) cells of switch-matrix results (named by author)."""
    pairs = set()
    for m in matrices:
        pairs |= {(c.prefix_model, c.model) for c in m.cells if c.prefix_model != c.model}
    return pairs


def production_models(shapes: Shapes) -> tuple[str, ...]:
    """Models (authors) production has shapes for."""
    return tuple(sorted({r.model for r in shapes.rules if r.model != POOLED}))


def _check_model(model: str, evals: Sequence[EvalResult], shapes: Shapes, authors: set[str]) -> None:
    """``NoDataError`` naming what exists when ``model`` is not an author on both sides."""
    prod = set(production_models(shapes))
    if model in authors and model in prod:
        return
    requested = {m: per for r in evals for m, per in r.authors.items()}
    if model in requested and model not in authors:
        who = ", ".join(f"{a} ({n} turns)" for a, n in requested[model].items())
        raise NoDataError(
            f"--model {model!r} is a requested model or group; compare joins on the author that "
            f"answered: its turns were answered by {who}"
        )
    have = (
        f"eval authors: {', '.join(sorted(authors)) or 'none'}; "
        f"production models: {', '.join(sorted(prod)) or 'none'}"
    )
    if model not in authors and model not in prod:
        raise NoDataError(f"unknown model {model!r} ({have})")
    side = "the eval" if model not in authors else "production"
    raise NoDataError(f"--model {model!r} has no data in {side} ({have})")


def _has_checkpoints(evals: Sequence[EvalResult], author: str) -> bool:
    """Whether ``author`` has a checkpoint with a pass or fail verdict in the eval results."""
    return any(c.author == author and c.script == POOLED and c.n > 0 for r in evals for c in r.curves)


def unmatched_names(
    shapes: Shapes, evals: Sequence[EvalResult], model: str | None = None
) -> dict[str, tuple[str, ...]]:
    """Eval authors and rules production has no counts for, and the reverse (empty lists left out).

    These drop out of the too-clean comparison (joined on rule and author), so a typo'd
    rule name or an author named differently on one side would otherwise pass unnoticed.
    With ``model``, only that author's rules are listed.
    """
    if not evals:
        return {}
    ev = {
        (c.rule, c.author)
        for r in evals
        for c in r.curves
        if c.script == POOLED and c.n > 0 and (model is None or c.author == model)
    }
    prod = {
        (r.rule, r.model)
        for r in shapes.rules
        if r.model != POOLED and sum(r.n) > 0 and (model is None or r.model == model)
    }
    out = {
        "eval_rules": {rule for rule, _ in ev} - {rule for rule, _ in prod},
        "production_rules": {rule for rule, _ in prod} - {rule for rule, _ in ev},
    }
    if model is None:
        out["eval_authors"] = {a for _, a in ev} - {a for _, a in prod}
        out["production_models"] = {a for _, a in prod} - {a for _, a in ev}
    return {k: tuple(sorted(v)) for k, v in sorted(out.items()) if v}


def uncompared_checkpoints(
    shapes: Shapes,
    evals: Sequence[EvalResult],
    compared: Sequence[TooClean],
    unmatched: dict[str, tuple[str, ...]],
    model: str | None = None,
) -> tuple[str, ...]:
    """Eval (rule, author, depth) left out although production knows both names: production has
    no counts for that rule on that author, or none in the bucket holding the depth (the eval
    is deeper than production reaches there). ``rule · author @ depth (bucket)``, sorted."""
    buckets = DepthBuckets.from_labels(shapes.buckets)
    done = {(r.rule, r.model, r.depth) for r in compared}
    skip_rules, skip_authors = set(unmatched.get("eval_rules", ())), set(unmatched.get("eval_authors", ()))
    out = []
    for rule, author, depth in sorted(eval_by_author(evals)):
        if (rule, author, depth) in done or rule in skip_rules or author in skip_authors:
            continue
        if model is not None and author != model:
            continue
        shape = shapes.shape(rule, author)
        where = "" if shape is None else f" ({buckets.bucket(depth)})"
        out.append(f"{rule} · {author} @ {depth}{where}")
    return tuple(out)


_UNMATCHED_TEXT = {
    "eval_checkpoints": "eval checkpoints production has no checks at (rule · author @ depth, not compared)",
    "eval_authors": "eval authors with no production counts (not compared)",
    "production_models": "production models the eval has no rows for",
    "eval_rules": "eval rules production has no counts for (not compared)",
    "production_rules": "production rules the eval does not check",
    "matrix_authors": "switch-matrix authors with no production counts (their cells cover no pair)",
}


def unmatched_matrix_authors(shapes: Shapes, matrices: Sequence[Any]) -> tuple[str, ...]:
    """Authors of switch-matrix cells that production has no counts or handoff pairs for: a
    matrix measured under other names covers none of production's pairs, which would all be
    listed as missing with nothing saying why."""
    known = set(production_models(shapes))
    known |= {p[k] for p in shapes.handoff_pairs for k in ("prefix_model", "model")}
    authors = {a for m in matrices for c in m.cells for a in (c.prefix_model, c.model)}
    return tuple(sorted(authors - known))


def unmatched_lines(unmatched: dict[str, tuple[str, ...]]) -> list[str]:
    """One human-readable line per kind of unmatched name."""
    return [f"{_UNMATCHED_TEXT[k]}: {', '.join(v)}" for k, v in unmatched.items()]


def compare(
    shapes: Shapes,
    evals: Sequence[EvalResult],
    matrices: Sequence[Any] = (),
    *,
    alpha: float = 0.05,
    min_gap: float = 0.05,
    min_share: float = 0.01,
    model: str | None = None,
    sources: Sequence[str] | None = None,
) -> Comparison:
    """All three comparisons (see the module docstring).

    ``sources`` names the eval results (their files) in errors.

    Raises:
        InputError: two eval results hold the same runs (``check_overlap``).
        NoDataError: production has no shapes, ``model`` is unknown or absent on one
            side, or eval results were given and no (rule, author, depth) could be compared.
    """
    if not shapes.rules:
        raise NoDataError(f"the shapes from {shapes.source} hold no production checks")
    check_overlap(evals, sources)
    authors = {a for r in evals for a in r.author_names} | {c.author for r in evals for c in r.curves}
    authors |= {a for m in matrices for c in m.cells for a in (c.prefix_model, c.model)}
    if model is not None:
        _check_model(model, evals, shapes, authors)
    rules = tuple(too_clean(shapes, evals, alpha=alpha, min_gap=min_gap, model=model))
    if evals and not rules and model is not None and not _has_checkpoints(evals, model):
        turns = sum(per.get(model, 0) for r in evals for per in r.authors.values())
        raise NoDataError(
            f"--model {model!r}: the eval has no checkpoint rows for {model} (it answered {turns} turn(s), "
            "none of them a checkpoint with a pass or fail verdict), so there is nothing to compare with "
            "production; put checkpoints where it answers, or compare another author"
        )
    if evals and not rules:
        raise NoDataError(
            "no (rule, author, depth) of the eval has production data to compare with "
            f"(eval authors: {', '.join(sorted(authors)) or 'none'}; production models: "
            f"{', '.join(production_models(shapes))}); {JOIN_NOTE}"
        )
    notes = [JOIN_NOTE]
    one_sided = unmatched_names(shapes, evals, model)
    uncovered = uncompared_checkpoints(shapes, evals, rules, one_sided, model)
    if uncovered:
        one_sided = dict(sorted({**one_sided, "eval_checkpoints": uncovered}.items()))
    strangers = unmatched_matrix_authors(shapes, matrices)
    if strangers:
        one_sided = dict(sorted({**one_sided, "matrix_authors": strangers}.items()))
    notes += unmatched_lines(one_sided)
    unmatched = sorted({(r.rule, r.depth_bucket) for r in rules if not r.depth_matched})
    if unmatched:
        notes.append(
            "no production Markov fit to match depths within "
            + ", ".join(f"{r} @ {b}" for r, b in unmatched)
            + ": compared with the bucket as a whole and never flagged"
        )
    covered = matrix_pairs(matrices)
    if not matrices:
        notes.append("no switch-matrix result given: every frequent production pair is listed as missing")
    frequent = [
        p
        for p in shapes.handoff_pairs
        if p["share"] >= min_share and (model is None or model in (p["prefix_model"], p["model"]))
    ]
    if not evals and not frequent:  # only matrices, and nothing of production's to check them against
        raise NoDataError(
            "nothing compared: no eval run result was given and production has no handoff pair with "
            f"--min-share {min_share} or more of handoff turns"
            + (f" involving {model}" if model is not None else "")
            + " to check the switch matrices against"
        )
    missing = tuple(p for p in frequent if (p["prefix_model"], p["model"]) not in covered)
    p90 = shapes.session_lengths.get("p90")
    scripts = [s for r in evals for s in r.scripts if s["checkpoints"]]
    return Comparison(
        suggest_checkpoints(shapes.session_lengths),
        dict(shapes.session_lengths),
        max((max(s["checkpoints"]) for s in scripts), default=0),
        tuple(sorted({s["id"] for s in scripts if p90 is not None and max(s["checkpoints"]) < p90})),
        rules,
        missing,
        alpha,
        min_gap,
        model=model,
        eval_authors=tuple(sorted(authors)),
        production_models=production_models(shapes),
        notes=tuple(notes),
        unmatched=one_sided,
    )


def render_text(c: Comparison) -> str:
    """A short human-readable report."""
    lines = [
        f"compared {len(c.rules)} (rule, model, depth) cell(s), joined on the author"
        + (f", model {c.model}" if c.model else "")
        + f": eval authors {', '.join(c.eval_authors) or 'none'}; production models "
        f"{', '.join(c.production_models) or 'none'}",
        "(a) suggested checkpoint depths from production session lengths: "
        f"{', '.join(map(str, c.suggested_checkpoints)) or 'n/a'} "
        f"(eval's deepest checkpoint: {c.eval_max_depth or 'none, no eval run result given'})",
    ]
    if c.short_scripts:
        lines.append(f"    scripts shorter than production p90: {', '.join(c.short_scripts)}")
    lines.append(f"(b) production significantly below eval (alpha={c.alpha}, gap>={c.min_gap}):")
    for r in c.flagged:
        lines.append(
            f"    TOO CLEAN {r.rule} · {r.model} @ depth {r.depth} ({r.depth_bucket}): eval "
            f"{r.eval_adherence:.3f} (n={r.eval_n}) vs production {r.production_adherence:.3f} "
            f"(n={r.production_n}), p_adj={r.p_adjusted:.2g}"
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
