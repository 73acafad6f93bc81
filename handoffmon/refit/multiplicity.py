"""False-discovery control across pairs: Benjamini–Hochberg on p-values that may be NaN."""

from __future__ import annotations

import numpy as np


def bh_adjust(p_values: np.ndarray) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values (q-values) over the finite entries of ``p_values``.

    NaN marks a hypothesis that was not tested (a pair below ``min_n``, a degenerate cell):
    it stays NaN and does not count towards the family size m, so untested pairs neither
    get a q-value nor make the tested ones harder to declare. Any shape is accepted; the
    family is every finite entry of the array (call once per rule).

    Args:
        p_values: raw p-values in [0, 1] or NaN.

    Returns:
        Array of the same shape: ``scipy.stats.false_discovery_control(method="bh")`` of
        the finite entries, NaN elsewhere.
    """
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    tested = np.isfinite(p)
    if tested.any():
        out[tested] = _bh(np.clip(p[tested], 0.0, 1.0))
    return out


def _bh(ps: np.ndarray) -> np.ndarray:
    """``false_discovery_control(ps, method="bh")``'s arithmetic on a 1-d array, without its
    array-API dispatch (~1.5 ms per call at 10⁴ p-values, 11 calls per K = 100 refit):
    sorted p·m/i, running minimum from the largest, back in the input order, clipped."""
    m = len(ps)
    if m <= 1:
        return ps
    order = np.argsort(ps)
    adj = ps[order] * (m / np.arange(1, m + 1, dtype=float))
    np.minimum.accumulate(adj[::-1], out=adj[::-1])
    out = np.empty_like(adj)
    out[order] = adj
    return np.clip(out, 0.0, 1.0)


def bh_significant(p_values: np.ndarray, fdr: float) -> np.ndarray:
    """True where the BH-adjusted p-value is ≤ ``fdr`` (False for NaN entries).

    Rejecting every hypothesis with adjusted p ≤ q controls the false-discovery rate at q
    for independent or positively dependent tests (pairs sharing a baseline are positively
    dependent: their Δ share the baseline's error with the same sign).
    """
    if not 0.0 < fdr < 1.0:
        raise ValueError(f"fdr must be in (0, 1), got {fdr}")
    q = bh_adjust(p_values)
    return np.asarray(np.isfinite(q) & (q <= fdr))
