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
    from scipy.stats import false_discovery_control

    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    tested = np.isfinite(p)
    if tested.any():
        out[tested] = false_discovery_control(np.clip(p[tested], 0.0, 1.0), method="bh")
    return out


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
