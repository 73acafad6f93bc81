"""Depth-stratified handoff effect Δ(A→B) with delta-method standard errors.

Production Δ is **observational**: which conversations get handed off (router
fallbacks, rate limits, long sessions) is not randomized, so Δ(A→B) only removes the
confounding that runs through conversation depth. It compares, within each depth
bucket, the adherence of turns by B after A with turns by B after B, and averages the
differences with the handoff cell's depth mix as weights (the effect "on the handoffs
that actually happened").

The variance treats checks as independent Bernoulli trials. Turns of one conversation
in the same cell are correlated (and, pooled over rules, so are the checks of one
turn), so intervals are somewhat optimistic for long conversations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DeltaTable:
    """Δ for every ordered pair (prefix a, suffix b) of one or more rules.

    All arrays have shape (R, K, K) indexed [rule, prefix a, suffix b]; entries with
    ``reported`` False (diagonal, too few turns, no common depth bucket) are NaN.

    Attributes:
        n: checked turns of the handoff cell in all buckets.
        n_used: checked turns of the handoff cell in buckets the baseline also has.
        n_base: checked turns of the baseline B→B in those buckets.
        delta: Σ_d w_d (p̂_AB,d − p̂_BB,d) with w_d = n_AB,d / n_used.
        var: Σ_d w_d² (v_AB,d + v_BB,d), the delta-method variance (weights fixed).
        coverage: n_used / n.
        reported: the pair passed ``min_n`` on both sides.
        weights: (R, K, K, S) stratum weights w_d of each pair.
        base_var: (R, K, S) variance of the baseline B→B adherence per stratum.
        handoff_var: (R, K, K) the part of ``var`` from the handoff cell alone.
    """

    n: np.ndarray
    n_used: np.ndarray
    n_base: np.ndarray
    delta: np.ndarray
    var: np.ndarray
    coverage: np.ndarray
    reported: np.ndarray
    weights: np.ndarray
    base_var: np.ndarray
    handoff_var: np.ndarray

    def block_cov(self, rule: int = 0) -> Callable[[int, np.ndarray], np.ndarray]:
        """Covariance of Δ(a→b) over prefixes a for one suffix b (for the decomposition).

        Cov(Δ_ab, Δ_a'b) = Σ_d w_ab,d w_a'b,d v_bb,d (the shared baseline), plus the
        handoff cell's own variance on the diagonal.
        """

        def cov(b: int, a: np.ndarray) -> np.ndarray:
            w = self.weights[rule, a, b]
            shared = (w * self.base_var[rule, b]) @ w.T
            return np.asarray(shared + np.diag(self.handoff_var[rule, a, b]))

        return cov


def binomial_var(x: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Variance of a proportion, p̃(1 − p̃)/n with p̃ = (x + ½)/(n + 1).

    The ½-shrunk p̃ (a Jeffreys-style correction) keeps the variance positive for
    strata at 0% or 100% adherence, which are common for strict rules; without it a
    stratum with 30/30 passes would claim zero uncertainty and dominate the WLS weights.
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        pt = (x + 0.5) / (n + 1.0)
        return np.where(n > 0, pt * (1.0 - pt) / n, 0.0)


def stratified_delta(
    passes: np.ndarray,
    fails: np.ndarray,
    min_n: int,
    *,
    depth_adjusted: bool = True,
) -> DeltaTable:
    """Δ(A→B) for all ordered pairs of models, per rule.

    Args:
        passes: (R, P, K, S) pass counts, prefix axis P ≥ K whose first K entries are
            the suffix models in the same order; S = strata (depth buckets).
        fails: same shape, fail counts.
        min_n: minimum checked turns in the handoff cell *and* in its baseline (in the
            strata used) for a pair to be reported.
        depth_adjusted: False collapses all strata into one, giving the naive
            depth-unadjusted contrast (kept for comparison; confounded by depth).

    Returns:
        A ``DeltaTable``. Strata where the baseline has no checked turn are dropped and
        the weights renormalized (``coverage`` says how much of the cell was kept).
    """
    if not depth_adjusted:
        passes = passes.sum(axis=-1, keepdims=True)
        fails = fails.sum(axis=-1, keepdims=True)
    k = passes.shape[2]
    xh = passes[:, :k].astype(float)
    nh = xh + fails[:, :k]
    diag = np.arange(k)
    xb = passes[:, diag, diag, :].astype(float)[:, None, :, :]
    nb = xb + fails[:, diag, diag, :][:, None, :, :]
    valid = (nh > 0) & (nb > 0)
    n_all = nh.sum(axis=-1)
    n_used = np.where(valid, nh, 0.0).sum(axis=-1)
    n_base = np.where(valid, nb, 0.0).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        w = np.where(valid, nh, 0.0) / n_used[..., None]
        diff = np.where(valid, xh / nh - xb / nb, 0.0)
        delta = (w * diff).sum(axis=-1)
        vb = binomial_var(xb, nb)
        var_h = (w * w * binomial_var(xh, nh)).sum(axis=-1)
        var = var_h + (w * w * vb).sum(axis=-1)
        coverage = n_used / n_all
    off_diag = ~np.eye(k, dtype=bool)[None]
    reported = off_diag & (n_used >= min_n) & (n_base >= min_n)
    return DeltaTable(
        n=n_all.astype(np.int64),
        n_used=n_used.astype(np.int64),
        n_base=n_base.astype(np.int64),
        delta=np.where(reported, delta, np.nan),
        var=np.where(reported, var, np.nan),
        coverage=np.where(n_all > 0, coverage, np.nan),
        reported=reported,
        weights=np.nan_to_num(w),
        base_var=vb[:, 0],
        handoff_var=np.nan_to_num(var_h),
    )


def pool_rules(arr: np.ndarray) -> np.ndarray:
    """(R, P, K, D) → (1, P, K, R·D): rules become extra strata for the pooled fit.

    Pooling this way compares A→B with B→B within the same rule *and* depth bucket,
    so a pair that happens to be checked mostly on a hard rule is not penalized.
    """
    r, p, k, d = arr.shape
    return np.moveaxis(arr, 0, -1).reshape(1, p, k, d * r)
