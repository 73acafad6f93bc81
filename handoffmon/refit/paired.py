"""Intervals for a difference of paired proportions, conversation-clustered, from counters.

* ``newcombe_paired`` — Newcombe's square-and-add interval for paired data (method 10 of
  Newcombe 1998, Stat Med 17:2635): with the 2×2 table (a both pass, b only the first
  passes, c only the second passes, d both fail), p₁ = (a + b)/n, p₂ = (a + c)/n, each
  marginal's Wilson interval (l, u) and the continuity-corrected correlation φ̂ of the two
  marginals, L = Δ − √((p₁ − l₁)² − 2φ̂(p₁ − l₁)(u₂ − p₂) + (u₂ − p₂)²) and U = Δ +
  √((u₁ − p₁)² − 2φ̂(u₁ − p₁)(p₂ − l₂) + (p₂ − l₂)²). Checked against Fagerland, Lydersen &
  Laake's reference implementation (R package ``contingencytables``) in the tests.
* ``paired_design_effect`` — clustered over multinomial variance of Δ̂ = Σ(b − c)/Σn, from
  per-conversation sums of the discordance (``counts.SHADOW_CLUSTER``); dividing the table
  by it gives effective counts (the same effective-sample-size approach as
  ``intervals.design_effect`` for the observational cells).
* ``newcombe_paired_p`` — the two-sided p-value dual to the interval (p < α exactly when
  the 1 − α interval excludes 0), by bisection on the quantile; with ``df`` the reference is
  Student's t (``intervals.cluster_df`` of the pairs' conversations), as for the
  observational Δ.
"""

from __future__ import annotations

import numpy as np

from handoffmon.refit.intervals import effective_clusters, t_sf2, wilson


def newcombe_paired(
    a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray, z: float | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Newcombe square-and-add interval for p₁ − p₂ = (b − c)/n (real-valued counts allowed).

    Returns NaN bounds where n ≤ 0.
    """
    a, b, c, d = (np.asarray(v, dtype=float) for v in (a, b, c, d))
    n = a + b + c + d
    with np.errstate(invalid="ignore", divide="ignore"):
        p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = wilson(a + b, n, z)
    l2, u2 = wilson(a + c, n, z)
    phi = _phi(a, b, c, d, n)
    delta = p1 - p2
    with np.errstate(invalid="ignore"):
        lo = delta - np.sqrt(
            np.maximum((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0.0)
        )
        hi = delta + np.sqrt(
            np.maximum((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2, 0.0)
        )
    return np.clip(lo, -1.0, 1.0), np.clip(hi, -1.0, 1.0)


def _phi(a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Correlation of the marginals with Newcombe's correction: ad − bc above n/2 shrinks by
    n/2, between 0 and n/2 counts as 0, a negative one is kept; 0 when a margin is empty."""
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    cross = a * d - b * c
    num = np.where(cross > n / 2, cross - n / 2, np.where(cross >= 0, 0.0, cross))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(margins > 0, num / np.sqrt(margins), 0.0)


def paired_design_effect(b: np.ndarray, c: np.ndarray, n: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """Clustered / multinomial variance of Δ̂ = (b − c)/n, at least 1.

    Args:
        b, c: discordant pair counts; n: pairs.
        sums: (..., 7) per-conversation sums G, Σb², Σc², Σbc, Σbn, Σcn, Σn²
            (``counts.SHADOW_CLUSTER`` order).

    V_cl = G/(G − 1) · Σ_c (d_c − Δ̂ n_c)² / n² with d_c = b_c − c_c, so Σd² = Σb² − 2Σbc +
    Σc² and Σdn = Σbn − Σcn; V_mult = (q̃ − Δ̂²)/n with q̃ = (b + c + ½)/(n + 1), positive
    even without discordant pairs. G = 0 (no sums) gives 1; one conversation gives n, also
    when it began before a window (G = 0 beside Σn² > 0: ``intervals.effective_clusters``).
    """
    b, c, n = (np.asarray(v, dtype=float) for v in (b, c, n))
    g, b2, c2, bc, bn, cn, n2 = np.moveaxis(np.asarray(sums, dtype=float), -1, 0)
    g = effective_clusters(g, n2, n)  # a window's straddling conversations add Σn², not G
    with np.errstate(invalid="ignore", divide="ignore"):
        delta = (b - c) / n
        d2, dn = b2 - 2 * bc + c2, bn - cn
        ss = np.maximum(d2 - 2 * delta * dn + delta * delta * n2, 0.0)
        v_cl = g / (g - 1.0) * ss / (n * n)
        q = (b + c + 0.5) / (n + 1.0)
        v_mult = np.maximum(q - delta * delta, q / (n + 1.0)) / n
        deff = np.maximum(v_cl / v_mult, 1.0)
    deff = np.where(g >= 2, deff, np.where(g > 0, np.maximum(n, 1.0), 1.0))
    return np.where(np.isfinite(deff) & (n > 0), deff, 1.0)


def newcombe_paired_p(
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray,
    d: np.ndarray,
    *,
    df: np.ndarray | None = None,
    iterations: int = 28,
) -> np.ndarray:
    """Two-sided p-value dual to ``newcombe_paired``: 2·P(T > z*), z* where the bound facing 0
    reaches 0 (bisection on [0, 40]; Δ = 0 gives 1, an empty table NaN). T is normal, or
    Student's t with ``df`` when given (dual to the interval at ``t_quantile(z, df)``)."""
    a, b, c, d = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (a, b, c, d)))
    n = a + b + c + d
    out = np.where(n > 0, 1.0, np.nan)
    live = (n > 0) & (b != c)
    up = (b > c)[live]
    la, lb, lc, ld = (v[live] for v in (a, b, c, d))
    lo_z = np.zeros(int(live.sum()))
    hi_z = np.full_like(lo_z, 40.0)
    for _ in range(iterations):
        mid = (lo_z + hi_z) / 2
        lo, hi = newcombe_paired(la, lb, lc, ld, mid)
        excludes = np.where(up, lo > 0, hi < 0)
        lo_z = np.where(excludes, mid, lo_z)
        hi_z = np.where(excludes, hi_z, mid)
    live_df = None if df is None else np.broadcast_to(np.asarray(df, dtype=float), n.shape)[live]
    out[live] = np.clip(t_sf2((lo_z + hi_z) / 2, live_df), 0.0, 1.0)
    return out
