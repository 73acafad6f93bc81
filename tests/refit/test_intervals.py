"""Score intervals, design effect and dual p-values against statsmodels and direct computation."""

from __future__ import annotations

import numpy as np
import pytest

from handoffmon.counts import cluster_increments
from handoffmon.refit.intervals import (
    cluster_df,
    design_effect,
    newcombe,
    newcombe_p,
    t_quantile,
    welch_df,
    wilson,
    z_value,
)


def test_wilson_matches_statsmodels() -> None:
    """Wilson bounds equal statsmodels' proportion_confint(method='wilson')."""
    sm = pytest.importorskip("statsmodels.stats.proportion")
    x, n = np.array([0, 3, 29, 30, 1900]), np.array([30, 30, 30, 30, 2000])
    lo, hi = wilson(x, n, z_value(0.95))
    ref = np.array(
        [sm.proportion_confint(a, b, alpha=0.05, method="wilson") for a, b in zip(x, n, strict=True)]
    )
    np.testing.assert_allclose(lo, ref[:, 0], atol=1e-12)
    np.testing.assert_allclose(hi, ref[:, 1], atol=1e-12)


@pytest.mark.parametrize(
    ("x1", "n1", "x2", "n2"), [(28, 30, 1900, 2000), (30, 30, 1990, 2000), (5, 40, 9, 41), (56, 70, 48, 80)]
)
def test_newcombe_matches_statsmodels(x1: int, n1: int, x2: int, n2: int) -> None:
    """Newcombe's hybrid score interval equals statsmodels' confint_proportions_2indep(method='newcomb')."""
    sm = pytest.importorskip("statsmodels.stats.proportion")
    lo, hi = newcombe(np.array(x1 / n1), np.array(n1), np.array(x2 / n2), np.array(n2), z_value(0.95))
    ref = sm.confint_proportions_2indep(x1, n1, x2, n2, method="newcomb", compare="diff", alpha=0.05)
    assert float(lo) == pytest.approx(ref[0], abs=1e-10)
    assert float(hi) == pytest.approx(ref[1], abs=1e-10)


def test_newcombe_published_example() -> None:
    """Newcombe (1998) Table II example (e): 56/70 vs 48/80 → 0.0524 to 0.3339 (method 10)."""
    lo, hi = newcombe(np.array(56 / 70), np.array(70), np.array(48 / 80), np.array(80), z_value(0.95))
    assert float(lo) == pytest.approx(0.0524, abs=5e-5)
    assert float(hi) == pytest.approx(0.3339, abs=5e-5)


def test_p_value_is_dual_to_the_interval() -> None:
    """p < 0.05 exactly when the 95% interval excludes 0; at p the interval just touches 0."""
    rng = np.random.default_rng(1)
    n1, n2 = rng.integers(20, 400, 200), rng.integers(20, 2000, 200)
    p1, p2 = rng.binomial(n1, 0.9) / n1, rng.binomial(n2, 0.92) / n2
    p = newcombe_p(p1, n1, p2, n2)
    lo, hi = newcombe(p1, n1, p2, n2, z_value(0.95))
    excludes = (lo > 0) | (hi < 0)
    far = np.abs(p - 0.05) > 1e-6
    assert np.array_equal((p < 0.05)[far], excludes[far])
    from scipy.special import ndtri

    zs = ndtri(1 - p / 2)
    lo_p, hi_p = newcombe(p1, n1, p2, n2, zs)
    touching = np.where(p1 > p2, lo_p, hi_p)
    inner = (p > 1e-8) & (p < 1)
    np.testing.assert_allclose(touching[inner], 0, atol=1e-6)


def test_p_value_bisection_takes_the_same_steps_as_the_plain_one() -> None:
    """The in-place bisection (shared z², one test for both signs) gives bit for bit the
    p-values of the plain loop over ``newcombe``'s bounds, NaN, ties and 0/100% included."""
    from scipy.special import ndtr

    rng = np.random.default_rng(5)
    m = 3000
    p1, p2 = rng.uniform(0, 1, m), rng.uniform(0, 1, m)
    p1[:100], p2[100:200], p1[200:300], p1[300:310] = 0.0, 1.0, p2[200:300], np.nan
    p1[310:400] = p2[310:400] + rng.normal(0, 1e-6, 90)
    n1, n2 = np.exp(rng.uniform(-0.5, 13, m)), np.exp(rng.uniform(-0.5, 13, m))
    n2[400:410] = 0.0
    got = newcombe_p(p1, n1, p2, n2)
    d = p1 - p2
    lo_z, hi_z = np.zeros(m), np.full(m, 40.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        for _ in range(28):
            mid = (lo_z + hi_z) / 2
            lo, hi = newcombe(p1, n1, p2, n2, mid)
            excludes = np.where(d > 0, lo > 0, hi < 0)
            lo_z, hi_z = np.where(excludes, mid, lo_z), np.where(excludes, hi_z, mid)
    want = np.clip(2.0 * ndtr(-(lo_z + hi_z) / 2), 0.0, 1.0)
    want = np.where(d == 0, 1.0, want)
    want = np.where(np.isfinite(d) & (n1 > 0) & (n2 > 0), want, np.nan)
    np.testing.assert_allclose(got, want, rtol=0, atol=0)


def test_wald_undercovers_where_newcombe_holds() -> None:
    """n = 30 vs 2,000 at p = 0.95 (the issue's case): Newcombe covers ≥ 0.93, Wald does not."""
    rng = np.random.default_rng(7)
    reps = 4000
    x1, x2 = rng.binomial(30, 0.95, reps), rng.binomial(2000, 0.95, reps)
    p1, p2 = x1 / 30, x2 / 2000
    lo, hi = newcombe(p1, np.full(reps, 30), p2, np.full(reps, 2000), z_value(0.95))
    cover = np.mean((lo <= 0) & (hi >= 0))
    se = np.sqrt(p1 * (1 - p1) / 30 + p2 * (1 - p2) / 2000)
    wald = np.mean(np.abs(p1 - p2) <= 1.96 * se)
    assert cover >= 0.93
    assert wald < 0.90


def test_design_effect_equals_the_direct_sandwich() -> None:
    """Counter increments summed over checks give the same variance as (y_c, n_c) per conversation."""
    rng = np.random.default_rng(3)
    g = 40
    y, n = np.zeros(g, dtype=int), rng.integers(1, 30, g)
    difficulty = rng.uniform(0.6, 1.0, g)
    sums = np.zeros(4)
    for c in range(g):
        yc = 0
        for i in range(n[c]):
            passed = bool(rng.random() < difficulty[c])
            sums += cluster_increments(yc, i, passed)
            yc += passed
        y[c] = yc
    assert sums.tolist() == [g, (y**2).sum(), (y * n).sum(), (n**2).sum()]
    x, total = y.sum(), n.sum()
    p = x / total
    v_cl = g / (g - 1) * np.sum((y - p * n) ** 2) / total**2
    pt = (x + 0.5) / (total + 1)
    expected = max(v_cl / (pt * (1 - pt) / total), 1.0)
    assert float(design_effect(*sums, x, total)) == pytest.approx(expected)
    assert float(design_effect(*sums, x, total)) > 1.5  # heterogeneous conversations cluster


def test_design_effect_edge_cases() -> None:
    """No cluster sums → 1; one conversation → n (one effective turn); never below 1."""
    assert float(design_effect(0, 0, 0, 0, 10, 20)) == 1.0
    assert float(design_effect(1, 100, 200, 400, 10, 20)) == 20.0
    # every conversation exactly at the mean: sandwich below binomial, floored at 1
    assert float(design_effect(10, 10 * 81, 10 * 90, 10 * 100, 90, 100)) == 1.0


def test_cluster_df_counts_effective_conversations() -> None:
    """Equal conversations: G − 1; one conversation with most checks: near the floor of 1; a
    single conversation: 1; no cluster sums: ∞ (the normal reference)."""
    sizes = [np.full(12, 5), np.array([1, 1, 1, 1, 40]), np.array([7]), np.zeros(0, dtype=int)]
    g = np.array([len(s) for s in sizes], dtype=float)
    n2 = np.array([float((s**2).sum()) for s in sizes])
    n = np.array([float(s.sum()) for s in sizes])
    df = cluster_df(g, n2, n)
    assert df[0] == pytest.approx(11.0)
    assert df[1] == pytest.approx(max(44**2 / 1604 - 1, 1.0))
    assert df[2] == 1.0
    assert np.isinf(df[3])


def test_welch_df_matches_scipy_welch_test() -> None:
    """Welch–Satterthwaite on two sample variances equals scipy's unequal-variance t-test df;
    an arm with df = ∞ drops out; both infinite stay infinite."""
    from scipy import stats

    rng = np.random.default_rng(4)
    x, y = rng.normal(0, 1, 9), rng.normal(0, 3, 25)
    want = stats.ttest_ind(x, y, equal_var=False).df
    got = welch_df(np.var(x, ddof=1) / 9, np.array(8.0), np.var(y, ddof=1) / 25, np.array(24.0))
    assert float(got) == pytest.approx(float(want), rel=1e-12)
    assert float(welch_df(np.array(0.2), np.array(5.0), np.array(0.1), np.array(np.inf))) == pytest.approx(
        0.3**2 / (0.2**2 / 5)
    )
    assert np.isinf(welch_df(np.array(0.2), np.array(np.inf), np.array(0.1), np.array(np.inf)))


def test_t_interval_and_p_value_stay_dual() -> None:
    """With per-pair degrees of freedom, p < 0.05 exactly when the interval at the t quantile
    excludes 0; p grows as df shrinks; df = ∞ gives the normal reference."""
    from scipy import stats

    rng = np.random.default_rng(6)
    n1, n2 = rng.integers(20, 400, 300), rng.integers(20, 2000, 300)
    p1, p2 = rng.binomial(n1, 0.88) / n1, rng.binomial(n2, 0.92) / n2
    df = rng.uniform(1.0, 60.0, 300)
    z = z_value(0.95)
    q = t_quantile(z, df)
    np.testing.assert_allclose(q, stats.t.ppf(0.975, df), rtol=1e-10)
    p = newcombe_p(p1, n1, p2, n2, df=df)
    lo, hi = newcombe(p1, n1, p2, n2, q)
    far = np.abs(p - 0.05) > 1e-6
    assert np.array_equal((p < 0.05)[far], ((lo > 0) | (hi < 0))[far])
    normal = newcombe_p(p1, n1, p2, n2)
    moved = (normal > 0) & (normal < 1)
    assert np.all(p[moved] > normal[moved])
    np.testing.assert_allclose(newcombe_p(p1, n1, p2, n2, df=np.full(300, np.inf)), normal, rtol=1e-12)
    assert float(t_quantile(z, np.array(np.inf))) == z
