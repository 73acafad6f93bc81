"""Handoff effect Δ(A→B): depth-stratified, depth-adjusted within buckets, conversation-clustered.

Production Δ is **observational**: which conversations get handed off is not
randomized, so Δ(A→B) removes only the confounding that runs through depth. Per depth
bucket d it compares the handoff cell's pass rate p_AB,d with B's **clean baseline**
(same-author turns whose history holds no other model's text) evaluated at the handoff
cell's mean depth in that bucket, and averages over buckets with the handoff cell's
depth mix w_d = n_AB,d / n (the effect on the handoffs that happened):

* **within-bucket depth adjustment** — the baseline at the handoff cell's mean depth
  m_AB,d is interpolated linearly between the baseline's bucket means (m_BB,j, p_BB,j) of
  bucket d and its neighbour on the side of m_AB,d (extrapolated from the nearest segment
  at the ends, by at most one gap between bucket means and only from a neighbour with
  ``EXTRAPOLATE_MIN_N`` baseline checks; the baseline read is kept in [0, 1]). Without
  depth sums (old sources) the bucket's own baseline is used. The baseline side is then
  Σ_j Ω_j p_BB,j / n with weights Ω_j = Σ_d n_AB,d c_dj, so Δ stays a linear contrast of
  bucket proportions;
* **variance** — Σ_d n_AB,d² v_AB,d / n² + Σ_j Ω_j² v_BB,j / n², each arm multiplied by its
  cell's design effect (``intervals.design_effect``, from per-conversation cluster sums);
* **interval** — Newcombe's hybrid score interval on effective counts: the handoff arm
  n*_h = n / deff_h, the baseline arm n*_b = n² / (Σ_j Ω_j² / n_BB,j) / deff_b (Kish);
* **reference distribution** — Student's t, not the normal: each arm's degrees of freedom
  are its cell's effective conversations minus one (``intervals.cluster_df``: N²/Σn_c²),
  combined by Welch–Satterthwaite over the two arms' variances; the interval uses the t
  quantile at the confidence level in place of z. A clustered variance from a few dozen
  effective conversations is itself noisy, and on the normal the far tail of the p-values
  came out two to three times too thick;
* **p-value** dual to that interval; ``significant`` after Benjamini–Hochberg per rule.

Per-rule results are sums (``PairSums``) so the pooled fit adds them over rules (rules
are extra strata) and applies the design effect of the cluster sums pooled over rules
(a turn's checks of several rules are one cluster, never independent).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from handoffmon.refit.cells import RuleArrays
from handoffmon.refit.decomposition import LowRankBlocks
from handoffmon.refit.intervals import (
    binomial_var,
    cluster_df,
    design_effect,
    matched_n,
    newcombe,
    newcombe_p,
    t_quantile,
    welch_df,
)
from handoffmon.refit.multiplicity import bh_adjust

EXTRAPOLATE_MIN_N = 30
"""Baseline checks a neighbouring depth bucket needs before the baseline is extrapolated
from it (beyond the outermost bucket mean; interpolation needs none)."""

BLOCK_COV_MAX_MODELS = 150
"""Above this many models the decomposition weights pairs independently (the K³ shared-
baseline covariance would dominate memory and time)."""


@dataclass(frozen=True)
class SharedBaseline:
    """Σ_j Ω_abj Ω_a'bj v_BB,j per suffix b, kept as its factors while their rank r is below K.

    Attributes:
        omega: (K, K, r) [b, a, j] Ω_abj, j over depth buckets (× rules once pooled), or None.
        var: (K, r) [b, j] v_BB,j, or None.
        dense: (K, K, K) [b, a, a'] the sum itself once r would reach K (pooled over many
            rules), so memory stays K³ at most; else None.
    """

    omega: np.ndarray | None
    var: np.ndarray | None
    dense: np.ndarray | None = None

    def __add__(self, other: SharedBaseline) -> SharedBaseline:
        if self.omega is None or self.var is None or other.omega is None or other.var is None:
            return SharedBaseline(None, None, self.to_dense() + other.to_dense())
        if self.omega.shape[2] + other.omega.shape[2] >= self.omega.shape[0]:
            return SharedBaseline(None, None, self.to_dense() + other.to_dense())
        omega = np.concatenate([self.omega, other.omega], axis=2)
        return SharedBaseline(omega, np.concatenate([self.var, other.var], axis=1))

    def to_dense(self) -> np.ndarray:
        """(K, K, K) [b, a, a'] the summed covariance term."""
        if self.dense is not None:
            return self.dense
        assert self.omega is not None and self.var is not None
        return np.asarray(np.einsum("baj,bcj,bj->bac", self.omega, self.omega, self.var, optimize=True))


@dataclass(frozen=True)
class PairSums:
    """Additive sums for every ordered pair [prefix a, suffix b] (K, K), and into-B totals (K,).

    Attributes:
        n: checked turns of the handoff cell in all buckets.
        n_used: in buckets where the baseline has data.
        n_base: baseline turns in the buckets the contrast uses.
        x_h: passes of the handoff cell in used buckets.
        x_b: Σ_j Ω_j p_BB,j (the depth-matched baseline times n_used).
        var_h: Σ_d n_d² v_AB,d.
        var_b: Σ_j Ω_j² v_BB,j.
        inv_nb: Σ_j Ω_j² / n_BB,j.
        block: the shared-baseline covariance Σ_j Ω_abj Ω_a'bj v_BB,j (``SharedBaseline``),
            or None above ``BLOCK_COV_MAX_MODELS``.
        x_all: passes of the handoff cell in all buckets (with ``n``: its pass rate).
        base_x: (K,) passes of B's clean baseline, all buckets.
        base_n: (K,) its checked turns.
        into_*: the same sums for "every handoff into B" (prefix = any model), shape (K,).
    """

    n: np.ndarray
    x_all: np.ndarray
    base_x: np.ndarray
    base_n: np.ndarray
    n_used: np.ndarray
    n_base: np.ndarray
    x_h: np.ndarray
    x_b: np.ndarray
    var_h: np.ndarray
    var_b: np.ndarray
    inv_nb: np.ndarray
    block: SharedBaseline | None
    into_n_used: np.ndarray
    into_x_h: np.ndarray
    into_x_b: np.ndarray
    into_var_h: np.ndarray
    into_var_b: np.ndarray
    into_inv_nb: np.ndarray

    def __add__(self, other: PairSums) -> PairSums:
        out: dict[str, Any] = {}
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            out[f.name] = None if a is None or b is None else a + b
        return PairSums(**out)


def pair_sums(arr: RuleArrays, *, adjust_depth: bool = True) -> PairSums:
    """Sums of one rule."""
    k = arr.base_passes.shape[0]
    xh, nh = arr.passes[:k], arr.passes[:k] + arr.fails[:k]
    xb, nb = arr.base_passes, arr.base_passes + arr.base_fails
    valid = (nh > 0) & (nb[None] > 0)
    nh_v = np.where(valid, nh, 0.0)
    coef = _depth_coefficients(arr, nh, nb, valid) if adjust_depth else None
    omega = _omega(nh_v, coef)
    with np.errstate(invalid="ignore", divide="ignore"):
        pb = np.where(nb > 0, xb / nb, 0.0)
        inv_b = np.where(nb > 0, 1.0 / nb, 0.0)
    vb, vh = binomial_var(xb, nb), binomial_var(xh, nh)
    n_used = nh_v.sum(-1)
    used_b = (omega != 0).astype(float)
    off = ~np.eye(k, dtype=bool)
    off3 = off[..., None]
    into_omega = np.where(off3, omega, 0.0).sum(axis=0)
    x_used = np.where(valid, xh, 0.0).sum(-1)
    var_h = (nh_v**2 * vh).sum(-1)
    block = None
    if k <= BLOCK_COV_MAX_MODELS:
        block = SharedBaseline(np.ascontiguousarray(omega.transpose(1, 0, 2)), vb)
    return PairSums(
        n=nh.sum(-1),
        x_all=xh.sum(-1),
        base_x=xb.sum(-1),
        base_n=nb.sum(-1),
        n_used=n_used,
        n_base=(used_b * nb[None]).sum(-1),
        x_h=x_used,
        x_b=(omega * pb[None]).sum(-1),
        var_h=var_h,
        var_b=(omega**2 * vb[None]).sum(-1),
        inv_nb=(omega**2 * inv_b[None]).sum(-1),
        block=block,
        into_n_used=np.where(off, n_used, 0.0).sum(0),
        into_x_h=np.where(off, x_used, 0.0).sum(0),
        into_x_b=(into_omega * pb).sum(-1),
        into_var_h=np.where(off, var_h, 0.0).sum(0),
        into_var_b=(into_omega**2 * vb).sum(-1),
        into_inv_nb=(into_omega**2 * inv_b).sum(-1),
    )


def _depth_coefficients(
    arr: RuleArrays, nh: np.ndarray, nb: np.ndarray, valid: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Interpolation weights of the baseline buckets (d−1, d, d+1) for each handoff stratum.

    Returns (c_down, c_same, c_up), each (K, K, D), or None when the counts carry no depth sums.
    """
    k = nb.shape[0]
    if not np.any(arr.depth[:k]) or not np.any(arr.base_depth):
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        mh = arr.depth[:k] / nh
        mb = np.where(nb > 0, arr.base_depth / nb, np.nan)
    mb_up = np.concatenate([mb[:, 1:], np.full((k, 1), np.nan)], axis=1)[None]
    mb_dn = np.concatenate([np.full((k, 1), np.nan), mb[:, :-1]], axis=1)[None]
    mb_d = mb[None]
    has_up, has_dn = np.isfinite(mb_up), np.isfinite(mb_dn)
    go_up = has_up & ((mh >= mb_d) | ~has_dn)
    go_dn = ~go_up & has_dn
    with np.errstate(invalid="ignore", divide="ignore"):
        t_up = (mh - mb_d) / (mb_up - mb_d)
        t_dn = (mb_d - mh) / (mb_d - mb_dn)
    ok = valid & np.isfinite(mh) & np.isfinite(mb_d)
    go_up &= ok & np.isfinite(t_up)
    go_dn &= ok & np.isfinite(t_dn)
    # Extrapolation (t < 0: the cell's mean depth lies beyond the outermost baseline mean)
    # reaches at most one bucket-mean gap and only leans on a neighbour with at least
    # EXTRAPOLATE_MIN_N baseline checks; otherwise the baseline is read at its own mean. A
    # line through a one-turn neighbour a depth away, stretched over three, put the baseline
    # at 3.6 and Δ at −2.7.
    nb_up = np.concatenate([nb[:, 1:], np.zeros((k, 1))], axis=1)[None]
    nb_dn = np.concatenate([np.zeros((k, 1)), nb[:, :-1]], axis=1)[None]
    t_up = np.where((t_up < 0) & (nb_up < EXTRAPOLATE_MIN_N), 0.0, np.clip(t_up, -1.0, 1.0))
    t_dn = np.where((t_dn < 0) & (nb_dn < EXTRAPOLATE_MIN_N), 0.0, np.clip(t_dn, -1.0, 1.0))
    c_up = np.where(go_up, t_up, 0.0)
    c_dn = np.where(go_dn, t_dn, 0.0)
    return c_dn, 1.0 - c_up - c_dn, c_up


def _omega(nh_v: np.ndarray, coef: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> np.ndarray:
    """Ω[a, b, j] = Σ_d n_ab,d c_dj: weight of baseline bucket j in pair (a, b)'s contrast."""
    if coef is None:
        return nh_v
    c_dn, c_same, c_up = coef
    omega: np.ndarray = nh_v * c_same
    omega[..., 1:] += (nh_v * c_up)[..., :-1]
    omega[..., :-1] += (nh_v * c_dn)[..., 1:]
    return omega


@dataclass(frozen=True)
class DeltaTable:
    """Δ of every ordered pair (K, K) of one fit; NaN where not ``reported``.

    Attributes:
        n, n_used, n_base: turns (see ``PairSums``).
        delta: P_h − P_b.
        var: clustered variance of ``delta``.
        ci_low, ci_high: Newcombe interval on effective counts.
        p_value: raw two-sided p-value (dual to the interval).
        p_adjusted: Benjamini–Hochberg adjusted over the reported pairs of the fit.
        significant: ``p_adjusted`` ≤ fdr.
        deff_h, deff_b: design effects applied to the handoff and baseline arms.
        coverage: n_used / n.
        reported: off-diagonal, n_used ≥ min_n and n_base ≥ min_n.
        block_cov: covariance of the Δ sharing a suffix (for the GLS): diagonal plus low
            rank, dense (K, K, K), or None.
        into: per suffix B, Δ of every handoff into B (``IntoTable``).
    """

    n: np.ndarray
    n_used: np.ndarray
    n_base: np.ndarray
    delta: np.ndarray
    var: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    p_value: np.ndarray
    p_adjusted: np.ndarray
    significant: np.ndarray
    deff_h: np.ndarray
    deff_b: np.ndarray
    coverage: np.ndarray
    reported: np.ndarray
    block_cov: np.ndarray | LowRankBlocks | None
    into: IntoTable


@dataclass(frozen=True)
class IntoTable:
    """Δ of all handoffs into each model B (prefix = any model), arrays (K,).

    ``p_value`` is dual to the interval, as the pairs'; ``p_adjusted`` Benjamini–Hochberg over
    the fit's reported models, and ``significant`` = ``p_adjusted`` ≤ fdr: one interval per
    model and fit pages more often than the interval's level once there are many of them.
    """

    n: np.ndarray
    delta: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    reported: np.ndarray
    p_value: np.ndarray
    p_adjusted: np.ndarray
    significant: np.ndarray


def deltas(s: PairSums, clusters: np.ndarray, z: float, min_n: int, fdr: float) -> DeltaTable:
    """Finalize ``PairSums`` into Δ, intervals, p-values and BH significance.

    Args:
        s: the fit's sums.
        clusters: (K + 2, K, 4) cluster sums (G, Σy², Σyn, Σn²); the diagonal holds the clean
            baselines'.
        z: normal quantile of the interval's level (the t quantile at that level is used).
        min_n: minimum checked turns in the handoff cell and in its baseline.
        fdr: Benjamini–Hochberg level for ``significant``.
    """
    k = s.n.shape[0]
    diag = np.arange(k)
    g, y2, yn, n2 = (clusters[:k, :, i] for i in range(4))
    deff_h = design_effect(g, y2, yn, n2, s.x_all, s.n)
    deff_b = np.broadcast_to(
        design_effect(g[diag, diag], y2[diag, diag], yn[diag, diag], n2[diag, diag], s.base_x, s.base_n),
        (k, k),
    )
    df_b = np.broadcast_to(cluster_df(g[diag, diag], n2[diag, diag], s.base_n), (k, k))
    with np.errstate(invalid="ignore", divide="ignore"):
        p_h, p_b = s.x_h / s.n_used, np.clip(s.x_b / s.n_used, 0.0, 1.0)
        var_h, var_b = deff_h * s.var_h / s.n_used**2, deff_b * s.var_b / s.n_used**2
        var = var_h + var_b
        # each arm's effective n is the one whose binomial variance is its own (Korn & Graubard)
        nstar_h = matched_n(p_h, var_h, s.n_used / deff_h)
        nstar_b = matched_n(p_b, var_b, s.n_used**2 / s.inv_nb / deff_b)
        coverage = s.n_used / s.n
    df = welch_df(var_h, cluster_df(g, n2, s.n), var_b, df_b)
    reported = ~np.eye(k, dtype=bool) & (s.n_used >= min_n) & (s.n_base >= min_n) & (s.inv_nb > 0)
    lo, hi = newcombe(p_h, nstar_h, p_b, nstar_b, t_quantile(z, df))
    p = np.full((k, k), np.nan)
    p[reported] = newcombe_p(
        p_h[reported], nstar_h[reported], p_b[reported], nstar_b[reported], df=df[reported]
    )
    q = bh_adjust(p)
    nan = np.nan
    per_b = {"deff_b": deff_b[0], "df_b": df_b[0]} if k else {"deff_b": np.zeros(0), "df_b": np.zeros(0)}
    return DeltaTable(
        n=s.n.astype(np.int64),
        n_used=s.n_used.astype(np.int64),
        n_base=s.n_base.astype(np.int64),
        delta=np.where(reported, p_h - p_b, nan),
        var=np.where(reported, var, nan),
        ci_low=np.where(reported, lo, nan),
        ci_high=np.where(reported, hi, nan),
        p_value=p,
        p_adjusted=q,
        significant=np.isfinite(q) & (q <= fdr),
        deff_h=deff_h,
        deff_b=deff_b,
        coverage=np.where(s.n > 0, coverage, nan),
        reported=reported,
        block_cov=_block_cov(s, deff_h, deff_b),
        into=_into(s, deff_h, **per_b, min_n=min_n, z=z, fdr=fdr, df_h=_into_df(g, n2, s.n)),
    )


def _block_cov(s: PairSums, deff_h: np.ndarray, deff_b: np.ndarray) -> np.ndarray | LowRankBlocks | None:
    """[b, a, a'] covariance of Δ(a→b) and Δ(a'→b): shared baseline plus own variance,
    as diagonal plus low-rank factors, or dense (K, K, K) once pooled over many rules."""
    if s.block is None:
        return None
    k = s.n.shape[0]
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = np.where(s.n_used > 0, 1.0 / s.n_used, 0.0)  # [a, b]
        sb = scale.T  # [b, a]
        own = (deff_h * s.var_h * scale**2).T
    if s.block.dense is None:
        assert s.block.omega is not None and s.block.var is not None
        root = np.sqrt(s.block.var * deff_b[0][:, None])  # [b, j]
        return LowRankBlocks(own, s.block.omega * sb[:, :, None] * root[:, None, :])
    cov = s.block.dense * deff_b[0][:, None, None] * sb[:, :, None] * sb[:, None, :]
    cov[:, np.arange(k), np.arange(k)] += own
    return np.asarray(cov)


def _into_df(g: np.ndarray, n2: np.ndarray, n: np.ndarray) -> np.ndarray:
    """(K,) degrees of freedom of the handoff arm into each B: the effective conversations of
    its cells pooled over prefixes (a conversation in two of them counts twice)."""
    off = ~np.eye(n.shape[0], dtype=bool)
    return cluster_df(*(np.where(off, x, 0.0).sum(axis=0) for x in (g, n2, n)))


def _into_neff(n_used: np.ndarray, deff_h: np.ndarray) -> np.ndarray:
    """(K,) effective checks of the handoff arm into each B: N²/Σ_a n_a·deff_a over its cells a→B.

    The arm's pass rate pools the cells, Σx_a/N, whose variance is p(1 − p)·Σ n_a deff_a / N²
    when each cell's is p(1 − p)·deff_a/n_a. Σ n_a/deff_a (what was used) is that with the
    harmonic mean of the design effects in place of the checks-weighted one: too small a
    variance when one cell (a ping-pong pair's) clusters far more than the rest — into-B
    intervals of the two models most ping-pong conversations alternate between covered 0.87.
    ``deff_h`` is the fit's own, from the cluster sums it was given (pooled over rules in
    ``all``, where the R checks of a turn are one cluster member)."""
    off = ~np.eye(n_used.shape[0], dtype=bool)
    n = np.where(off, n_used, 0.0)
    weighted = np.where(off & (n_used > 0), n_used * deff_h, 0.0).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(weighted > 0, n.sum(axis=0) ** 2 / weighted, 0.0)


def _into(
    s: PairSums, deff_h: np.ndarray, deff_b: np.ndarray, df_h: np.ndarray, df_b: np.ndarray, z: float,
    min_n: int, fdr: float,
) -> IntoTable:  # fmt: skip
    """Δ into each B; ``deff_h`` (K, K) the cells' design effects, ``deff_b``/``df_b`` (K,) B's
    baseline's. The handoff arm's variance is the cells' (each times its design effect), as the
    pairs' is; its effective n falls back on ``_into_neff`` where the pass rate is 0 or 1."""
    off = ~np.eye(len(deff_b), dtype=bool)
    neff_h = _into_neff(s.n_used, deff_h)
    with np.errstate(invalid="ignore", divide="ignore"):
        var_h = np.where(off & (s.n_used > 0), deff_h * s.var_h, 0.0).sum(axis=0) / s.into_n_used**2
        p_h, p_b = s.into_x_h / s.into_n_used, np.clip(s.into_x_b / s.into_n_used, 0.0, 1.0)
        var_b = deff_b * s.into_var_b / s.into_n_used**2
        nstar_b = matched_n(p_b, var_b, s.into_n_used**2 / s.into_inv_nb / deff_b)
        nstar_h = matched_n(p_h, var_h, neff_h)
    df = welch_df(var_h, df_h, var_b, df_b)
    lo, hi = newcombe(p_h, nstar_h, p_b, nstar_b, t_quantile(z, df))
    ok = (s.into_n_used >= min_n) & (s.into_inv_nb > 0)
    p = np.full(len(ok), np.nan)
    p[ok] = newcombe_p(p_h[ok], nstar_h[ok], p_b[ok], nstar_b[ok], df=df[ok])
    q = bh_adjust(p)
    return IntoTable(
        n=s.into_n_used.astype(np.int64),
        delta=np.where(ok, p_h - p_b, np.nan),
        ci_low=np.where(ok, lo, np.nan),
        ci_high=np.where(ok, hi, np.nan),
        reported=ok,
        p_value=p,
        p_adjusted=q,
        significant=np.isfinite(q) & (q <= fdr),
    )
