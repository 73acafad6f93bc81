"""Experimental switch costs from shadow pairs, next to the observational contrast of the same pair.

Estimand: for prefix model A and model B, switch cost(A→B) = E[y(B continues A's prefix) −
y(A continues A's prefix)] over the prefixes shadow continuation sampled. Both arms give
that pair on one prefix: a handoff turn (A wrote the history, B served) shadowed by A, and
a same-author turn (A→A served) shadowed by a candidate B.

The observational refit's Δ(A→B) = s(A→B) − s(B→B) compares against **B's** baseline, a
different estimand. The like-for-like observational number is s(A→B) − s(A→A): the
handoff cell against **A's** clean baseline, depth-adjusted the same way. It comes from
the same cell arrays with the pair axes swapped (``swap_roles``), so ``delta.pair_sums``
and ``delta.deltas`` compute it unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from handoffmon.counts import POOLED_RULE, SHADOW_CLUSTER, SHADOW_STATS, SHADOW_TABLE, ShadowKey
from handoffmon.refit.cells import RuleArrays
from handoffmon.refit.delta import DeltaTable
from handoffmon.refit.intervals import cluster_df, t_quantile
from handoffmon.refit.multiplicity import bh_adjust
from handoffmon.refit.paired import newcombe_paired, newcombe_paired_p, paired_design_effect
from handoffmon.refit.result import SwitchCost

Pair = tuple[str, str]
"""(prefix model A, model B)."""

_POS = {s: i for i, s in enumerate(SHADOW_STATS)}
_TABLE = slice(0, len(SHADOW_TABLE))
_CLUSTER = slice(len(SHADOW_TABLE), len(SHADOW_TABLE) + len(SHADOW_CLUSTER))
_HANDOFF = _POS["handoff_arm"]


def shadow_cells(shadow: Mapping[ShadowKey, int]) -> dict[str, dict[Pair, np.ndarray]]:
    """Counters → {rule: {(A, B): stats vector in ``SHADOW_STATS`` order}} (``all`` included).

    The ``all`` entry sums every rule's table and arm counts, and takes its cluster sums
    from the counters kept under rule ``all`` (a pair's checks of several rules are one
    cluster; adding per-rule sums would treat them as independent).
    """
    out: dict[str, dict[Pair, np.ndarray]] = {}
    for key, value in shadow.items():
        pos = _POS.get(key.stat)
        if pos is None or key.prefix_model == key.model:
            continue
        cells = out.setdefault(key.rule, {})
        cell = cells.setdefault((key.prefix_model, key.model), np.zeros(len(SHADOW_STATS)))
        cell[pos] += value
    clusters = out.pop(POOLED_RULE, {})
    pooled: dict[Pair, np.ndarray] = {}
    for cells in out.values():
        for pair, v in cells.items():
            acc = pooled.setdefault(pair, np.zeros(len(SHADOW_STATS)))
            acc[_TABLE] += v[_TABLE]
            acc[_HANDOFF] += v[_HANDOFF]
    for pair, acc in pooled.items():
        if pair in clusters:
            acc[_CLUSTER] = clusters[pair][_CLUSTER]
    if pooled:
        out[POOLED_RULE] = pooled
    return out


def swap(x: np.ndarray) -> np.ndarray:
    """A (K + 2, K, ...) cell array with its first K rows' prefix and model axes swapped."""
    k = x.shape[1]
    return np.concatenate([x[:k].swapaxes(0, 1), x[k:]], axis=0)


def swap_roles(arr: RuleArrays) -> RuleArrays:
    """The cell arrays with prefix and model axes swapped (baselines unchanged).

    ``delta.pair_sums`` contrasts cell [a, b] with the baseline of the model on axis 1; on
    the swapped arrays entry [b, a] is the handoff cell A→B contrasted with A's baseline.
    """
    return RuleArrays(
        swap(arr.passes), swap(arr.fails), swap(arr.depth), arr.base_passes, arr.base_fails,
        arr.base_depth, swap(arr.clusters), arr.transitions,
    )  # fmt: skip


def switch_costs(
    rule: str,
    cells: Mapping[Pair, np.ndarray],
    models: tuple[str, ...],
    observational: DeltaTable | None,
    *,
    z: float,
    min_n: int,
    fdr: float,
) -> list[SwitchCost]:
    """One ``SwitchCost`` per pair with shadow pairs; BH over the pairs with ≥ ``min_n`` pairs.

    Args:
        rule: rule name (or ``all``).
        cells: ``shadow_cells(...)[rule]``.
        models: the observational fit's models (axes of ``observational``).
        observational: Δ of the swapped cell arrays (``swap_roles``), entry [b, a] =
            s(A→B) − s(A→A); None when the counts have no observational cells.
        z: normal quantile of the intervals' level (the t quantile at that level is used,
            with the pairs' effective conversations minus one as degrees of freedom).
        min_n: pairs needed for an estimate.
        fdr: Benjamini–Hochberg level.
    """
    pairs = sorted(cells)
    if not pairs:
        return []
    v = np.stack([cells[p] for p in pairs])
    a, b, c, d = (v[:, i] for i in range(4))
    n = a + b + c + d
    deff = paired_design_effect(b, c, n, v[:, _CLUSTER])
    df = cluster_df(v[:, _POS["conversations"]], v[:, _POS["n2"]], n)
    ea, eb, ec, ed = (x / deff for x in (a, b, c, d))
    tested = n >= max(min_n, 1)
    lo, hi = newcombe_paired(ea, eb, ec, ed, t_quantile(z, df))
    p = np.where(tested, newcombe_paired_p(ea, eb, ec, ed, df=df), np.nan)
    q = bh_adjust(p)
    with np.errstate(invalid="ignore", divide="ignore"):
        est = (b - c) / n
        var = deff * np.maximum((b + c) / n - est * est, 0.0) / n
        p_model, p_prefix = (a + b) / n, (a + c) / n
    obs = _observational(pairs, models, observational)
    with np.errstate(invalid="ignore"):
        gap = np.abs(est - obs[0]) / np.sqrt(var + obs[3])
    disagree = tested & np.isfinite(gap) & (gap > z)
    nan = np.full(len(pairs), np.nan)

    def shown(x: np.ndarray) -> np.ndarray:
        return np.where(tested, x, nan)

    cols = {
        "n_pairs": n, "estimate": shown(est), "ci_low": shown(lo), "ci_high": shown(hi),
        "significant": np.isfinite(q) & (q <= fdr), "p_value": p, "p_adjusted": q, "design_effect": deff,
        "model_adherence": shown(p_model), "prefix_adherence": shown(p_prefix),
        "handoff_pairs": v[:, _HANDOFF],
        "observational": obs[0], "observational_ci_low": obs[1], "observational_ci_high": obs[2],
        "disagree": disagree,
    }  # fmt: skip
    lists = {k: np.asarray(col).tolist() for k, col in cols.items()}
    return [
        SwitchCost(rule, pa, pb, **{k: _CASTS.get(k, float)(col[j]) for k, col in lists.items()})
        for j, (pa, pb) in enumerate(pairs)
    ]


_CASTS = {"n_pairs": int, "handoff_pairs": int, "significant": bool, "disagree": bool}


def _observational(
    pairs: list[Pair], models: tuple[str, ...], dt: DeltaTable | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(estimate, ci_low, ci_high, variance) of s(A→B) − s(A→A) per pair, NaN where unknown."""
    out = np.full((4, len(pairs)), np.nan)
    if dt is None:
        return out[0], out[1], out[2], out[3]
    idx = {m: i for i, m in enumerate(models)}
    for j, (pa, pb) in enumerate(pairs):
        ia, ib = idx.get(pa), idx.get(pb)
        if ia is not None and ib is not None:
            out[:, j] = dt.delta[ib, ia], dt.ci_low[ib, ia], dt.ci_high[ib, ia], dt.var[ib, ia]
    return out[0], out[1], out[2], out[3]
