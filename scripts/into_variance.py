"""Where the variance of Δ into B comes from, on the calibration population (statistics.md, Δ into B).

Run: ``.venv/bin/python scripts/into_variance.py [--refits 200] [--seed 7] [--pingpong 0.08]``
(≈ 1.5 s a refit). Per null refit and model B it takes the refit's Δ into B, its interval and
the counters' variance of each arm, and from the simulator's rows the conversation-clustered
variance of the same linear contrast: each conversation's influence Σ_h r_i/N − Σ_b w_i r_i
(handoff checks into B in used buckets; B's clean baseline checks with w_i = Ω_j/(N n_j)),
with r_i the check's residual around its bucket's mean (the plug-in sandwich, what
per-conversation data would give) or around its planted expectation (the oracle only a
simulator has). It prints, per model, the spread of Δ over the refits against each variance,
the arms' shared-conversation covariance, each interval's coverage of no effect and a candidate
baseline variance from today's counters (``candidate_var_b``); then, by depth bucket, where the
baseline arm's variance sits.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import numpy as np
from scipy.special import ndtri

from handoffmon.depth import DepthBuckets
from handoffmon.refit.cells import RuleArrays, build_cells
from handoffmon.refit.delta import (
    PairSums,
    _depth_coefficients,
    _into_df,
    _into_neff,
    _omega,
    deltas,
    pair_sums,
)
from handoffmon.refit.intervals import cluster_df, design_effect, matched_n, newcombe, t_quantile, welch_df
from handoffmon.sim.calibration import standard_population
from handoffmon.sim.counting import clean_mask, counts_from_rows
from handoffmon.sim.population import TurnRows, clipped_mean, simulate

MODELS = ("atlas", "birch", "cedar", "dune", "ember")
LEVELS = (0.95, 0.99, 0.999)
Z = 1.959964


def counter_vars(arr: RuleArrays, s: PairSums) -> dict[str, np.ndarray]:
    """(K,) each arm's variance of Δ into B as ``delta._into`` computes it, with the fallback
    effective n and the degrees of freedom its interval takes."""
    k = s.n.shape[0]
    g, y2, yn, n2 = (arr.clusters[:k, :, q] for q in range(4))
    deff_h = design_effect(g, y2, yn, n2, s.x_all, s.n)
    d = np.arange(k)
    deff_b = design_effect(g[d, d], y2[d, d], yn[d, d], n2[d, d], s.base_x, s.base_n)
    off = ~np.eye(k, dtype=bool)
    with np.errstate(invalid="ignore", divide="ignore"):
        return {
            "var_h": np.where(off & (s.n_used > 0), deff_h * s.var_h, 0.0).sum(0) / s.into_n_used**2,
            "var_b": deff_b * s.into_var_b / s.into_n_used**2,
            "n_h": _into_neff(s.n_used, deff_h),
            "n_b": s.into_n_used**2 / s.into_inv_nb / deff_b,
            "df_h": _into_df(g, n2, s.n),
            "df_b": cluster_df(g[d, d], n2[d, d], s.base_n),
        }


def covers(
    s: PairSums, arms: dict[str, np.ndarray], b: int, var_b: float, truth: float, df_b: float | None = None
) -> list[float]:
    """Whether ``_into``'s interval, with ``var_b`` (and ``df_b``, if given) for the baseline arm,
    holds ``truth`` at each of ``LEVELS``."""
    n, v_b = s.into_n_used[b], np.asarray(var_b)
    p_h, p_b = s.into_x_h[b] / n, np.clip(s.into_x_b[b] / n, 0.0, 1.0)
    n_h = matched_n(p_h, arms["var_h"][b], arms["n_h"][b])
    n_b = matched_n(p_b, v_b, arms["n_b"][b])
    df = welch_df(
        arms["var_h"][b], arms["df_h"][b], v_b, np.asarray(arms["df_b"][b] if df_b is None else df_b)
    )
    out = []
    for level in LEVELS:
        lo, hi = newcombe(p_h, n_h, p_b, n_b, t_quantile(float(ndtri(0.5 + level / 2)), df))
        out.append(float(lo <= truth <= hi))
    return out


def candidate_var_b(
    arr: RuleArrays, s: PairSums, b: int, omega: np.ndarray, widths: np.ndarray
) -> tuple[float, float]:
    """A baseline-arm variance today's counters can give (not what the refit does): each bucket's
    binomial variance at B's baseline depth curve (weighted least squares of p_j on the bucket's
    mean depth, clipped to [0.005, 0.995]) in place of its own p̃, times a per-bucket design
    effect 1 + (min(width_j, n_j) − 1)·ρ, ρ = (deff − 1)/(Σn²/N − 1) from the baseline's
    cluster sums (a clean conversation has at most one check per depth in a bucket). Also its
    degrees of freedom by Welch–Satterthwaite over the buckets, each with its fewest possible
    conversations (⌈n_j/width_j⌉) less one, at least 1."""
    x, n = arr.base_passes[b], arr.base_passes[b] + arr.base_fails[b]
    use = n > 0
    depth = np.where(use, arr.base_depth[b] / np.maximum(n, 1), 0.0)
    p = np.where(use, x / np.maximum(n, 1), 0.0)
    root = np.sqrt(n[use])
    design = np.c_[np.ones(use.sum()), depth[use]] * root[:, None]
    coef = np.linalg.lstsq(design, p[use] * root, rcond=None)[0]
    curve = np.clip(coef[0] + coef[1] * depth, 0.005, 0.995)
    g, y2, yn, n2 = arr.clusters[b, b]
    deff = design_effect(g, y2, yn, n2, s.base_x[b], s.base_n[b])
    rho = float(np.clip((deff - 1) / max(n2 / s.base_n[b] - 1, 1e-9), 0.0, 1.0))
    per_bucket = 1 + (np.minimum(widths, np.maximum(n, 1)) - 1) * rho
    var = np.where(use, curve * (1 - curve) / np.maximum(n, 1), 0.0)
    v = omega**2 * var * per_bucket / s.into_n_used[b] ** 2
    df = np.maximum(np.ceil(n / widths) - 1, 1)
    return float(v.sum()), float(v.sum() ** 2 / np.sum(v**2 / df))


def influences(
    rows: TurnRows, arr: RuleArrays, s: PairSums, names: list[str], b: int, buckets: DepthBuckets
) -> dict[str, Any]:  # fmt: skip
    """Per-conversation influences of both arms of Δ into ``b`` (plug-in and oracle residuals)."""
    k = len(names)
    mi = np.array([names.index(n) for n in rows.names])
    ok, y = rows.verdict < 2, (rows.verdict == 0).astype(float)
    m, pr = mi[rows.model], np.where(rows.prefix >= 0, mi[np.maximum(rows.prefix, 0)], -1)
    d = np.searchsorted(buckets.edges, rows.depth, side="right") - 1
    xh, nh = arr.passes[:k], arr.passes[:k] + arr.fails[:k]
    nb = arr.base_passes + arr.base_fails
    valid = (nh > 0) & (nb[None] > 0)
    omega = _omega(np.where(valid, nh, 0.0), _depth_coefficients(arr, nh, nb, valid))
    into_omega = np.where(~np.eye(k, dtype=bool)[..., None], omega, 0.0).sum(0)[b]
    n = s.into_n_used[b]
    hand = ok & (pr >= 0) & (pr != m) & (m == b) & valid[np.maximum(pr, 0), b, d]
    base = ok & clean_mask(rows) & (m == b)
    with np.errstate(invalid="ignore", divide="ignore"):
        cell_mean = np.where(nh > 0, xh / nh, 0.0)[np.maximum(pr, 0), b, d]
        base_mean = np.where(nb[b] > 0, arr.base_passes[b] / nb[b], 0.0)[d]
        w = into_omega[d] / (n * np.where(nb[b, d] > 0, nb[b, d], 1))
    e_h = clipped_mean(rows.mean + rows.shift, rows.noise_var)
    e_b = clipped_mean(rows.mean, rows.noise_var)
    c = int(rows.conversation.max()) + 1

    def per_conv(sel: np.ndarray, r: np.ndarray) -> np.ndarray:
        return np.bincount(rows.conversation[sel], r[sel], minlength=c)

    by_bucket = []
    for j in range(nb.shape[1]):
        sel = base & (d == j)
        plug_j, oracle_j = per_conv(sel, w * (y - base_mean)), per_conv(sel, w * (y - e_b))
        conv = np.count_nonzero(np.bincount(rows.conversation[sel], minlength=c))
        by_bucket.append((into_omega[j] / n, conv, nb[b, j], np.sum(oracle_j**2), np.sum(plug_j**2)))
    return {
        "into_omega": into_omega,
        "buckets": np.array(by_bucket),
        "plug_h": per_conv(hand, (y - cell_mean) / n),
        "plug_b": per_conv(base, w * (y - base_mean)),
        "oracle_h": per_conv(hand, (y - e_h) / n),
        "oracle_b": per_conv(base, w * (y - e_b)),
        "truth": float(np.mean(e_h[hand] - e_b[hand])),
    }


def one_refit(pop: Any, seed: list[int], buckets: DepthBuckets) -> list[dict[str, float]]:
    """Rows of one null refit, one per reported model."""
    rows = simulate(pop, 3000, seed=np.random.default_rng(seed))
    cells = build_cells(counts_from_rows(rows, buckets), buckets)
    arr = cells.rule_arrays(0)
    s = pair_sums(arr)
    into = deltas(s, arr.clusters, Z, 30, 0.05).into
    arms = counter_vars(arr, s)
    vh, vb = arms["var_h"], arms["var_b"]
    names, out = list(cells.models), []
    widths = np.diff([*buckets.edges, 10**6]).astype(float)
    for name in MODELS:
        b = names.index(name)
        if not into.reported[b]:
            continue
        f = influences(rows, arr, s, names, b, buckets)
        g = np.count_nonzero((f["plug_h"] != 0) | (f["plug_b"] != 0))
        both = np.count_nonzero((f["plug_h"] != 0) & (f["plug_b"] != 0))
        small = g / (g - 1)
        out.append({
            "model": name, "err": into.delta[b] - f["truth"], "lo": into.ci_low[b] - f["truth"],
            "hi": into.ci_high[b] - f["truth"], "counter_h": vh[b], "counter_b": vb[b],
            "plug_h": small * np.sum(f["plug_h"] ** 2), "plug_b": small * np.sum(f["plug_b"] ** 2),
            "plug_cov": small * np.sum(f["plug_h"] * f["plug_b"]),
            "oracle_h": np.sum(f["oracle_h"] ** 2), "oracle_b": np.sum(f["oracle_b"] ** 2),
            "oracle_cov": np.sum(f["oracle_h"] * f["oracle_b"]), "conversations": g, "both": both,
            "buckets": f["buckets"],
        })  # fmt: skip
        cand_b, cand_df = candidate_var_b(arr, s, b, f["into_omega"], widths)
        out[-1]["candidate_b"] = cand_b
        out[-1]["covers"] = np.array(covers(s, arms, b, vb[b], f["truth"]))
        out[-1]["candidate_covers"] = np.array(covers(s, arms, b, cand_b, f["truth"]))
        out[-1]["candidate_df_covers"] = np.array(covers(s, arms, b, cand_b, f["truth"], cand_df))
    return out


def report(rows: list[dict[str, Any]], labels: tuple[str, ...]) -> None:
    """Per model: spread of Δ over the refits against each variance (as SEs in pp) and coverage;
    then where the baseline arm's variance sits by depth bucket."""
    by_bucket: dict[str, np.ndarray] = {}
    for name in MODELS:
        r = [x for x in rows if x["model"] == name]
        if len(r) < 2:
            continue
        a = {key: np.array([x[key] for x in r], dtype=float) for key in r[0] if key != "model"}
        by_bucket[name] = a.pop("buckets")
        levels = {
            key: a.pop(key).mean(axis=0) for key in ("covers", "candidate_covers", "candidate_df_covers")
        }
        plug = a["plug_h"] + a["plug_b"] - 2 * a["plug_cov"]
        oracle = a["oracle_h"] + a["oracle_b"] - 2 * a["oracle_cov"]
        counters = a["counter_h"] + a["counter_b"]

        def se(v: np.ndarray) -> float:
            return float(100 * np.sqrt(np.mean(v)))

        share = (np.mean(2 * a["plug_cov"]) / np.mean(plug), np.mean(2 * a["oracle_cov"]) / np.mean(oracle))
        covers = (np.mean((a["lo"] <= 0) & (a["hi"] >= 0)), np.mean(np.abs(a["err"]) <= Z * np.sqrt(plug)))

        print(
            f"{name:6s} refits {len(r)}  SD of Δ {100 * a['err'].std(ddof=1):.2f} pp | SE counters "
            f"{se(counters):.2f} (handoff {se(a['counter_h']):.2f}, baseline {se(a['counter_b']):.2f}) "
            f"| oracle {se(oracle):.2f} ({se(a['oracle_h']):.2f}, {se(a['oracle_b']):.2f}) | candidate "
            f"baseline {se(a['candidate_b']):.2f} | plug-in "
            f"{se(plug):.2f} ({se(a['plug_h']):.2f}, {se(a['plug_b']):.2f}) | 2·cov/var plug-in "
            f"{share[0]:+.4f} oracle {share[1]:+.4f} | covers 0: interval {covers[0]:.3f}, ±1.96 plug-in "
            f"{covers[1]:.3f} | conversations {a['conversations'].mean():.0f}"
            f", with both arms {a['both'].mean():.0f}"
        )
        at = {key: "/".join(f"{c:.3f}" for c in v) for key, v in levels.items()}
        print(
            f"       covers 0 at {'/'.join(map(str, LEVELS))}: interval {at['covers']}, with the candidate "
            f"baseline {at['candidate_covers']}, and its bucket degrees of freedom "
            f"{at['candidate_df_covers']} (SD of Δ over its SE "
            f"{a['err'].std(ddof=1) / np.sqrt(np.mean(a['counter_h'] + a['candidate_b'])):.2f})"
        )
    for name, t in by_bucket.items():
        report_buckets(name, t, labels)


def report_buckets(name: str, t: np.ndarray, labels: tuple[str, ...]) -> None:
    """Baseline buckets of Δ into ``name`` ([refit, bucket, (Ω_j/N, conversations, checks, oracle
    variance, plug-in variance)]), over the refits where the bucket has clean checks."""
    total = t[:, :, 3].sum()
    for j, label in enumerate(labels):
        seen = t[:, j, 2] > 0
        if not seen.any():
            continue
        u = t[seen, j]
        share, plug = u[:, 3].sum() / total, u[:, 4].sum() / max(u[:, 3].sum(), 1e-30)
        print(
            f"  {name:6s} {label:>6s}: in {seen.mean():.2f} of refits; then weight {u[:, 0].mean():.3f}, "
            f"clean conversations {u[:, 1].mean():.1f}, checks {u[:, 2].mean():.1f} | share of the "
            f"baseline arm's variance {share:.2f}, plug-in/oracle {plug:.2f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--refits", type=int, default=200)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--pingpong", type=float, default=0.08, help="Population.pingpong_share")
    args = ap.parse_args()
    pop = dataclasses.replace(standard_population(), pingpong_share=args.pingpong)
    buckets = DepthBuckets()
    rows = [x for i in range(args.refits) for x in one_refit(pop, [args.seed, i], buckets)]
    report(rows, buckets.labels)


if __name__ == "__main__":
    main()
