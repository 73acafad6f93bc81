"""Score intervals for proportions and their differences, on design-effect-adjusted counts.

* ``wilson`` — Wilson score interval; keeps nominal coverage near 0 and 1 and never
  leaves [0, 1] (the Wald interval covers 83% at p = 0.95, n = 30).
* ``newcombe`` — Newcombe's hybrid score interval for p₁ − p₂ (method 10 of Newcombe
  1998, "MOVER-Wilson"): L = Δ − √((p₁ − l₁)² + (u₂ − p₂)²), U = Δ + √((u₁ − p₁)² + (p₂ −
  l₂)²) from each arm's Wilson interval. Stratified arms enter through their effective
  sample size (Kish): a weighted mean Σ w_d p_d has n* = 1 / Σ w_d²/n_d.
* ``design_effect`` — conversation-clustered variance of a ratio estimator over its
  binomial variance, from per-cell sums over conversations (G, Σy², Σyn, Σn²). Dividing
  counts by it gives effective counts on which the score intervals stay valid when the
  turns of a conversation are correlated (Korn & Graubard's effective-sample-size
  approach for complex samples).
* ``newcombe_p`` — the p-value of the test dual to the Newcombe interval (p < α exactly
  when the 1 − α interval excludes 0), found by bisection on the quantile.
* ``cluster_df``, ``welch_df``, ``t_quantile``, ``t_sf2`` — the reference distribution of a
  clustered estimate: Student's t with the effective number of conversations minus one
  (Kish: N²/Σn_c²), combined over two arms by Welch–Satterthwaite. A clustered variance
  estimated from few effective conversations is itself noisy, so the ratio of the estimate
  to it has heavier tails than the normal (the usual small-cluster correction, Cameron &
  Miller 2015, with G replaced by the effective count because conversations differ in
  size); intervals use the t quantile in place of z and p-values the t tail.
"""

from __future__ import annotations

import numpy as np


def z_value(confidence: float) -> float:
    """Two-sided normal quantile for a confidence level (0.95 → 1.95996…)."""
    from scipy.special import ndtri

    return float(ndtri(0.5 + confidence / 2.0))


def cluster_df(conversations: np.ndarray, n2: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Degrees of freedom of a cell's clustered estimate: N²/Σn_c² − 1, at least 1.

    N²/Σn_c² is the effective number of conversations (equal to G when every conversation
    brings the same number of checks, near 1 when one conversation brings most of them).
    Cells without cluster sums (G = 0: a source without them) get ∞, i.e. the normal
    reference of independent turns.
    """
    n2 = np.asarray(n2, dtype=float)
    n = np.asarray(n, dtype=float)
    g = effective_clusters(conversations, n2, n)
    with np.errstate(invalid="ignore", divide="ignore"):
        df = np.maximum(n * n / n2 - 1.0, 1.0)
    return np.where((g > 0) & (n2 > 0) & (n > 0) & np.isfinite(df), df, np.inf)


def effective_clusters(conversations: np.ndarray, n2: np.ndarray, n: np.ndarray) -> np.ndarray:
    """G, or N²/Σn_c² where that is larger: the conversations a cell's sums speak for.

    With exact sums N²/Σn_c² ≤ G (Cauchy–Schwarz), so this is G. Over a window
    (its increments), a conversation that began before it adds to Σn² but not to G: a cell
    carried by such conversations has G = 0 beside Σn² > 0, which read as "no cluster sums"
    (independent turns, the normal reference). N²/Σn_c² of the increments is a lower bound on
    the conversations behind them, so the cell counts as that many, at least one.
    """
    g = np.asarray(conversations, dtype=float)
    n2 = np.asarray(n2, dtype=float)
    n = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        kish = np.where((n2 > 0) & (n > 0), n * n / n2, 0.0)
    return np.where(np.isfinite(kish), np.maximum(g, kish), g)


def welch_df(v1: np.ndarray, df1: np.ndarray, v2: np.ndarray, df2: np.ndarray) -> np.ndarray:
    """Welch–Satterthwaite degrees of freedom of the sum of two independent variance estimates.

    (v₁ + v₂)² / (v₁²/df₁ + v₂²/df₂); an arm with df = ∞ adds nothing to the denominator,
    and a sum with no finite-df part (or no variance) is ∞.
    """
    v1, v2 = np.maximum(np.asarray(v1, dtype=float), 0.0), np.maximum(np.asarray(v2, dtype=float), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        den = np.where(np.isfinite(df1), v1 * v1 / df1, 0.0) + np.where(np.isfinite(df2), v2 * v2 / df2, 0.0)
        df = np.square(v1 + v2) / den
    return np.where((den > 0) & np.isfinite(df), np.maximum(df, 1.0), np.inf)


def t_quantile(z: float, df: np.ndarray) -> np.ndarray:
    """The t quantile with ``df`` degrees of freedom at the two-sided level of the normal ``z``
    (z where df = ∞; NaN df gives z)."""
    from scipy.special import ndtr, stdtrit

    df = np.asarray(df, dtype=float)
    finite = np.isfinite(df) & (df > 0)
    with np.errstate(invalid="ignore"):
        q = stdtrit(np.where(finite, df, 1.0), float(ndtr(z)))
    return np.where(finite, q, z)


def t_sf2(x: np.ndarray, df: np.ndarray | None) -> np.ndarray:
    """Two-sided tail 2·P(T_df > x) for x ≥ 0 (the normal's where df is None or ∞)."""
    from scipy.special import ndtr, stdtr

    x = np.asarray(x, dtype=float)
    if df is None:
        return np.asarray(2.0 * ndtr(-x))
    df = np.broadcast_to(np.asarray(df, dtype=float), x.shape)
    finite = np.isfinite(df) & (df > 0)
    return np.asarray(np.where(finite, 2.0 * stdtr(np.where(finite, df, 1.0), -x), 2.0 * ndtr(-x)))


def wilson(x: np.ndarray, n: np.ndarray, z: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval for x successes out of n (real-valued n allowed; NaN where n ≤ 0)."""
    x = np.asarray(x, dtype=float)
    n = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.clip(x / n, 0.0, 1.0)
        z2 = np.square(z)
        denom = 1.0 + z2 / n
        center = (p + z2 / (2 * n)) / denom
        half = z * np.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    lo = np.where(n > 0, np.clip(center - half, 0.0, 1.0), np.nan)
    hi = np.where(n > 0, np.clip(center + half, 0.0, 1.0), np.nan)
    return lo, hi


def newcombe(
    p1: np.ndarray, n1: np.ndarray, p2: np.ndarray, n2: np.ndarray, z: float | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Newcombe hybrid score interval for p1 − p2, arms given as proportion and (effective) n."""
    p1, p2 = np.clip(p1, 0.0, 1.0), np.clip(p2, 0.0, 1.0)
    l1, u1 = wilson(p1 * n1, n1, z)
    l2, u2 = wilson(p2 * n2, n2, z)
    d = p1 - p2
    lo = d - np.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    hi = d + np.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return lo, hi


def newcombe_p(
    p1: np.ndarray,
    n1: np.ndarray,
    p2: np.ndarray,
    n2: np.ndarray,
    *,
    df: np.ndarray | None = None,
    iterations: int = 28,
) -> np.ndarray:
    """Two-sided p-value dual to ``newcombe``: 2·P(T > z*) with z* the level where a bound hits 0.

    T is normal, or Student's t with ``df`` (same shape as the arms) when given: the
    interval built with ``t_quantile(z, df)`` then excludes 0 exactly when p < its α.

    The bound facing 0 moves monotonically towards the estimate as z shrinks, so z* is
    found by bisection on [0, 40] (all arrays at once; 28 halvings: z within 2e-7). Δ = 0
    gives p = 1; NaN inputs give NaN. Only the bound facing 0 is evaluated, on the pairs
    with a finite Δ ≠ 0, from per-arm terms computed once (``_WilsonArm``); the arithmetic
    is ``newcombe``'s, so the bisection takes the same steps.
    """
    p1, p2, n1, n2 = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (p1, p2, n1, n2)))
    d = p1 - p2
    bad = ~(np.isfinite(d) & (n1 > 0) & (n2 > 0))
    out = np.where(bad, np.nan, 1.0)
    live = ~bad & (d != 0)
    up = d[live] > 0
    c1, c2 = np.clip(p1[live], 0.0, 1.0), np.clip(p2[live], 0.0, 1.0)
    # Δ > 0 faces 0 with arm 1's lower and arm 2's upper Wilson bound; Δ < 0 the reverse.
    arm1 = _WilsonArm(c1, n1[live], np.where(up, -1.0, 1.0))
    arm2 = _WilsonArm(c2, n2[live], np.where(up, 1.0, -1.0))
    diff = c1 - c2
    # Δ < 0 excludes 0 when Δ + reach < 0, i.e. −Δ − reach > 0 (negation is exact): one test
    facing = np.where(up, diff, -diff)
    lo_z = np.zeros(len(diff))
    hi_z = np.full_like(lo_z, 40.0)
    mid, z2, r1, r2 = (np.empty_like(lo_z) for _ in range(4))
    excludes = np.empty(len(diff), dtype=bool)
    with np.errstate(invalid="ignore", divide="ignore"):
        for _ in range(iterations):
            np.add(lo_z, hi_z, out=mid)
            mid /= 2
            np.square(mid, out=z2)
            np.subtract(c1, arm1.bound(mid, z2, r1), out=r1)
            np.subtract(arm2.bound(mid, z2, r2), c2, out=r2)
            np.square(r1, out=r1)
            np.square(r2, out=r2)
            r1 += r2
            np.sqrt(r1, out=r1)  # reach
            np.subtract(facing, r1, out=r1)
            np.greater(r1, 0, out=excludes)
            np.copyto(lo_z, mid, where=excludes)
            np.logical_not(excludes, out=excludes)
            np.copyto(hi_z, mid, where=excludes)
    live_df = None if df is None else np.broadcast_to(np.asarray(df, dtype=float), d.shape)[live]
    out[live] = np.clip(t_sf2((lo_z + hi_z) / 2, live_df), 0.0, 1.0)
    return out


class _WilsonArm:
    """One arm's Wilson bound on one side, as a function of z (``wilson``'s arithmetic, with
    the terms that do not depend on z computed once)."""

    def __init__(self, p: np.ndarray, n: np.ndarray, side: np.ndarray) -> None:
        with np.errstate(invalid="ignore", divide="ignore"):
            self.p = np.clip(p * n / n, 0.0, 1.0)
            self.n, self.side = n, side
            self.two_n, self.four_nn = 2 * n, 4 * n * n
            self.pq_n = self.p * (1 - self.p) / n

    def bound(self, z: np.ndarray, z2: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """The bound at ``z`` (``z2`` = z², shared by both arms; written into ``out``): the same
        operations in the same order as ``wilson``, in place, so every bit matches."""
        if z2 is None:
            z2 = np.square(z)
        center = np.divide(z2, self.two_n, out=out)
        center += self.p
        denom = z2 / self.n
        denom += 1.0
        center /= denom
        half = z2 / self.four_nn
        half += self.pq_n
        np.sqrt(half, out=half)
        np.multiply(z, half, out=half)
        half /= denom
        half *= self.side
        center += half
        return np.asarray(np.clip(center, 0.0, 1.0, out=center))


def design_effect(
    conversations: np.ndarray, y2: np.ndarray, yn: np.ndarray, n2: np.ndarray, x: np.ndarray, n: np.ndarray
) -> np.ndarray:
    """Clustered over binomial variance of a cell's pass rate p̂ = Σy/Σn, at least 1.

    V_cl = G/(G − 1) · Σ_c (y_c − p̂ n_c)² / N² with Σ_c (y_c − p̂ n_c)² = Σy² − 2p̂Σyn + p̂²Σn²
    (the ratio estimator's sandwich variance with the usual small-sample factor), V_bin =
    p̃(1 − p̃)/N with p̃ = (x + ½)/(N + 1). Cells with no cluster sums (G = 0: a source
    without them) get 1, i.e. independent turns; a cell carried by one conversation
    (G = 1, or fewer than two by ``effective_clusters`` over a window) gets N, i.e. one
    effective turn. Rounding can make the sum of squares a
    hair negative; it is floored at 0.
    """
    x = np.asarray(x, dtype=float)
    n = np.asarray(n, dtype=float)
    g = effective_clusters(conversations, n2, n)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = x / n
        ss = np.maximum(y2 - 2 * p * yn + p * p * n2, 0.0)
        v_cl = g / (g - 1.0) * ss / (n * n)
        pt = (x + 0.5) / (n + 1.0)
        v_bin = pt * (1 - pt) / n
        deff = np.maximum(v_cl / v_bin, 1.0)
    deff = np.where(g >= 2, deff, np.where(g > 0, np.maximum(n, 1.0), 1.0))
    return np.where(np.isfinite(deff) & (n > 0), deff, 1.0)


def matched_n(p: np.ndarray, var: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """Effective n whose binomial variance p(1 − p)/n is ``var`` (Korn & Graubard 1998), so a score
    interval on it is as wide as the estimate's own variance says; ``fallback`` where p is 0 or 1
    or the variance is not positive.

    A stratified, clustered arm (the depth-matched baseline) has variance Σ w_j² p_j(1 − p_j)/n_j
    × deff. Kish's n* = 1/Σ w_j²/n_j with the pooled p(1 − p) is that only when the strata share
    one pass rate; for a model near 100% whose deep buckets pass less, and whose handoffs sit
    deep, it made the interval 1.2–1.4× narrower than the reported standard error.
    """
    p = np.asarray(p, dtype=float)
    var = np.asarray(var, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        matched = p * (1.0 - p) / var
    return np.where((p > 0) & (p < 1) & (var > 0) & np.isfinite(matched), matched, fallback)


def binomial_var(x: np.ndarray, n: np.ndarray) -> np.ndarray:
    """p̃(1 − p̃)/n with p̃ = (x + ½)/(n + 1): positive even at 0% or 100% (0 where n = 0)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        pt = (x + 0.5) / (n + 1.0)
        return np.where(n > 0, pt * (1.0 - pt) / n, 0.0)
