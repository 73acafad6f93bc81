"""Benjamini–Hochberg wrapper: matches statsmodels' multipletests, skips NaN, controls FDR."""

from __future__ import annotations

import numpy as np
import pytest

from handoffmon.refit.multiplicity import bh_adjust, bh_significant


def test_matches_statsmodels_fdr_bh_on_finite_entries() -> None:
    """Same q-values as the reference implementation (statsmodels.multipletests 'fdr_bh')."""
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    rng = np.random.default_rng(3)
    p = rng.uniform(0, 1, 40) ** 3
    _, ref, _, _ = multitest.multipletests(p, alpha=0.05, method="fdr_bh")
    np.testing.assert_allclose(bh_adjust(p), ref, rtol=1e-12)


def test_nan_entries_are_untested_and_do_not_grow_the_family() -> None:
    """A NaN stays NaN and the finite entries are adjusted as if it were absent."""
    p = np.array([[0.01, np.nan], [0.04, 0.03]])
    q = bh_adjust(p)
    assert np.isnan(q[0, 1])
    np.testing.assert_allclose(q[np.isfinite(p)], bh_adjust(np.array([0.01, 0.04, 0.03])))
    assert bh_adjust(np.full(3, np.nan)).tolist() == [pytest.approx(np.nan, nan_ok=True)] * 3


def test_hand_computed_example() -> None:
    """p = (0.01, 0.02, 0.03, 0.5): q_i = min_{j≥i} p_(j) m / j = (0.04, 0.04, 0.04, 0.5)."""
    np.testing.assert_allclose(bh_adjust(np.array([0.03, 0.5, 0.01, 0.02])), [0.04, 0.5, 0.04, 0.04])
    assert bh_significant(np.array([0.03, 0.5, 0.01, 0.02]), 0.05).tolist() == [True, False, True, True]


def test_controls_fdr_under_the_global_null() -> None:
    """Under the null, P(any rejection) ≤ q (BH = Simes there): 2,000 families of 30 tests."""
    rng = np.random.default_rng(11)
    hits = sum(bh_significant(rng.uniform(0, 1, 30), 0.05).any() for _ in range(2000))
    # binomial(2000, 0.05): mean 100, sd 9.7; 0.05 + 3 sd = 129
    assert hits <= 129


def test_rejects_bad_fdr() -> None:
    with pytest.raises(ValueError, match="fdr"):
        bh_significant(np.array([0.1]), 0.0)


@pytest.mark.parametrize("m", [1, 2, 7, 9900])
def test_equals_scipy_false_discovery_control_bit_for_bit(m: int) -> None:
    """The in-house BH is scipy's arithmetic: identical q-values, ties, 0s and 1s included."""
    from scipy.stats import false_discovery_control

    rng = np.random.default_rng(m)
    p = rng.uniform(0, 1, m) ** 3
    p[: m // 5] = np.round(p[: m // 5], 2)  # ties
    p[m // 5 : m // 4] = 0.0
    p[m // 4 : m // 3] = 1.0
    rng.shuffle(p)
    np.testing.assert_array_equal(bh_adjust(p), false_discovery_control(p, method="bh"))
