"""Vectorized BCa against scipy.stats.bootstrap on the same resamples (incl. paired)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from handoffmon.refit.bootstrap import bca_means, jackknife_acceleration


def _scipy(data: tuple, statistic, seed: int, resamples: int, paired: bool = False):  # type: ignore[no-untyped-def]
    return stats.bootstrap(
        data, statistic, n_resamples=resamples, method="BCa", paired=paired,
        vectorized=True, axis=-1, rng=np.random.default_rng(seed),
    )  # fmt: skip


def test_bca_means_equals_scipy_on_the_same_resamples() -> None:
    """Continuous scores, 6 cells at once: intervals and SE equal scipy's to 1e-9."""
    x = np.random.default_rng(0).gamma(2.0, 0.2, (6, 40))
    ours = bca_means(x, resamples=999, rng=7)
    ref = _scipy((x,), np.mean, 7, 999)
    np.testing.assert_allclose(ours.ci_low, ref.confidence_interval.low, rtol=0, atol=1e-9)
    np.testing.assert_allclose(ours.ci_high, ref.confidence_interval.high, rtol=0, atol=1e-9)
    np.testing.assert_allclose(ours.se, ref.standard_error, rtol=0, atol=1e-12)


def test_paired_delta_equals_scipy_paired_bca() -> None:
    """Binary episode scores (many ties): mean of δ = x − y matches scipy paired=True to 1e-9."""
    rng = np.random.default_rng(1)
    x = rng.binomial(1, 0.7, (5, 120)).astype(float)
    y = np.where(rng.random((5, 120)) < 0.8, x, 1 - x)  # correlated within episode
    ours = bca_means(x - y, resamples=1000, rng=3)
    ref = _scipy((x, y), lambda a, b, axis: np.mean(a - b, axis=axis), 3, 1000, paired=True)
    np.testing.assert_allclose(ours.ci_low, ref.confidence_interval.low, rtol=0, atol=1e-9)
    np.testing.assert_allclose(ours.ci_high, ref.confidence_interval.high, rtol=0, atol=1e-9)


def test_closed_form_jackknife_acceleration_matches_explicit_leave_one_out() -> None:
    """â from (Σx − xᵢ)/(n − 1) equals â from explicitly recomputed leave-one-out means."""
    x = np.random.default_rng(2).exponential(1.0, (3, 25))
    n = x.shape[1]
    loo = np.stack([np.delete(x, i, axis=1).mean(axis=1) for i in range(n)], axis=1)
    u = (n - 1) * (loo.mean(axis=1, keepdims=True) - loo)
    want = np.sum(u**3, axis=1) / (6 * np.sum(u**2, axis=1) ** 1.5)
    np.testing.assert_allclose(jackknife_acceleration(x), want, rtol=1e-10)


def test_constant_cells_get_no_interval_and_no_p_value() -> None:
    """All-equal scores (δ = 1, 1, 1, …) carry no sampling variation: no interval, no test (scipy: NaN)."""
    res = bca_means(np.ones((2, 30)), resamples=200, rng=0)
    assert res.estimate.tolist() == [1.0, 1.0]
    assert np.isnan(res.ci_low).all() and np.isnan(res.ci_high).all() and np.isnan(res.p_value).all()


def test_bca_interval_covers_true_mean_at_nominal_rate() -> None:
    """400 skewed samples at once: 95% BCa covers the true mean in 92–98% of them."""
    rng = np.random.default_rng(9)
    data = rng.exponential(1.0, (400, 60))
    res = bca_means(data, resamples=1000, rng=rng)
    coverage = np.mean((res.ci_low <= 1.0) & (res.ci_high >= 1.0))
    assert 0.92 <= coverage <= 0.98, coverage


def test_same_seed_same_interval() -> None:
    """Seeded runs are reproducible."""
    x = np.random.default_rng(4).random((2, 50))
    a, b = bca_means(x, rng=5), bca_means(x, rng=5)
    assert a.ci_low.tolist() == b.ci_low.tolist()
    assert a.ci_low.tolist() != pytest.approx(bca_means(x, rng=6).ci_low.tolist(), abs=0)
