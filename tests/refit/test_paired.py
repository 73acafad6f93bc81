"""Paired-proportion interval, its dual p-value and the clustered design effect of shadow pairs."""

from __future__ import annotations

import numpy as np
import pytest

from handoffmon.counts import SHADOW_CLUSTER, shadow_increments
from handoffmon.refit.intervals import z_value
from handoffmon.refit.paired import newcombe_paired, newcombe_paired_p, paired_design_effect


def test_matches_reference_implementation() -> None:
    """Cavo et al. (2012) table [[59, 6], [16, 80]]: the R package contingencytables
    (Fagerland, Lydersen & Laake, ch. 8, Newcombe_square_and_add_CI_paired_2x2) gives
    estimate −0.0621, 95% CI −0.1186 to −0.0046."""
    lo, hi = newcombe_paired(np.array(59), np.array(6), np.array(16), np.array(80), z_value(0.95))
    assert pytest.approx(-0.0621, abs=5e-5) == (6 - 16) / 161
    assert float(lo) == pytest.approx(-0.1186, abs=5e-5)
    assert float(hi) == pytest.approx(-0.0046, abs=5e-5)


def test_p_value_is_dual_to_the_interval() -> None:
    """At the level 1 − p the bound facing 0 sits on 0; Δ = 0 gives p = 1; empty gives NaN."""
    from scipy.special import ndtri

    tables = np.array([[59, 6, 16, 80], [10, 14, 2, 30], [40, 3, 3, 9], [0, 0, 0, 0], [5, 9, 1, 0]], float)
    p = newcombe_paired_p(*tables.T)
    assert p[2] == 1.0 and np.isnan(p[3])
    for row, pv in zip(tables[[0, 1, 4]], p[[0, 1, 4]], strict=True):
        lo, hi = newcombe_paired(*row, float(ndtri(1 - pv / 2)))
        facing = hi if row[1] < row[2] else lo
        assert abs(float(facing)) < 1e-6
    assert p[0] < 0.05 and p[1] < 0.01


def _cluster_sums(conv: np.ndarray, ym: np.ndarray, yp: np.ndarray) -> np.ndarray:
    """Per-conversation sums through the counters' increments, in arrival order."""
    state: dict[int, tuple[int, int, int]] = {}
    tot = dict.fromkeys(SHADOW_CLUSTER, 0)
    for c, m, p in zip(conv.tolist(), ym.tolist(), yp.tolist(), strict=True):
        b, cc, n = state.get(c, (0, 0, 0))
        for k, v in shadow_increments(b, cc, n, m, p).items():
            if k in tot:
                tot[k] += v
            assert v >= 0
        state[c] = (b + (m and not p), cc + (p and not m), n + 1)
    return np.array([tot[k] for k in SHADOW_CLUSTER], dtype=float)


def test_increments_sum_to_the_cluster_sums() -> None:
    """Adding pairs one at a time gives G, Σb², Σc², Σbc, Σbn, Σcn, Σn² of the final tallies."""
    rng = np.random.default_rng(4)
    conv = rng.integers(0, 40, 600)
    ym, yp = rng.random(600) < 0.7, rng.random(600) < 0.8
    got = _cluster_sums(conv, ym, yp)
    b = np.bincount(conv, ym & ~yp, minlength=40)
    c = np.bincount(conv, yp & ~ym, minlength=40)
    n = np.bincount(conv, minlength=40)
    want = [np.sum(n > 0), b @ b, c @ c, b @ c, b @ n, c @ n, n @ n]
    np.testing.assert_array_equal(got, want)


def test_design_effect_independent_vs_clustered() -> None:
    """One pair per conversation: ≈ 1. Whole conversations sharing their outcome: ≈ pairs per
    conversation. No cluster sums: 1. A single conversation: n."""
    rng = np.random.default_rng(5)
    ym, yp = rng.random(4000) < 0.6, rng.random(4000) < 0.7
    indep = _cluster_sums(np.arange(4000), ym, yp)
    b, c = float(np.sum(ym & ~yp)), float(np.sum(yp & ~ym))
    assert paired_design_effect(b, c, 4000.0, indep) == pytest.approx(1.0, abs=0.08)
    conv = np.repeat(np.arange(400), 10)
    ym_c, yp_c = np.repeat(ym[:400], 10), np.repeat(yp[:400], 10)
    clustered = _cluster_sums(conv, ym_c, yp_c)
    b, c = float(np.sum(ym_c & ~yp_c)), float(np.sum(yp_c & ~ym_c))
    assert paired_design_effect(b, c, 4000.0, clustered) == pytest.approx(10.0, rel=0.05)
    assert paired_design_effect(3.0, 1.0, 10.0, np.zeros(7)) == 1.0
    one = _cluster_sums(np.zeros(10, int), ym[:10], yp[:10])
    b, c = float(np.sum(ym[:10] & ~yp[:10])), float(np.sum(yp[:10] & ~ym[:10]))
    assert paired_design_effect(b, c, 10.0, one) == 10.0


def test_design_effect_of_a_conversation_that_began_before_the_window() -> None:
    """A window's increase of one conversation's sums (4 earlier pairs, 10 in the window) has
    G = 0 but Σn² = 14² − 4²: still one conversation (n), not independent pairs (1)."""
    before = _cluster_sums(np.zeros(4, int), np.ones(4, bool), np.zeros(4, bool))
    ym, yp = np.arange(14) % 2 == 0, np.arange(14) % 3 == 0
    ym[:4], yp[:4] = True, False
    after = _cluster_sums(np.zeros(14, int), ym, yp)
    window = after - before
    assert window[0] == 0 and window[6] == 14**2 - 4**2
    b, c = float(np.sum(ym[4:] & ~yp[4:])), float(np.sum(yp[4:] & ~ym[4:]))
    assert paired_design_effect(b, c, 10.0, window) == 10.0
