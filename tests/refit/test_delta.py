"""Depth-stratified Δ: the estimator, its minimum counts and its interval calibration."""

from __future__ import annotations

import numpy as np
import pytest

from handoffmon.depth import DepthBuckets
from handoffmon.refit.cells import build_cells, z_value
from handoffmon.refit.delta import binomial_var, pool_rules, stratified_delta
from tests.refit.synth import plant, synth_counts


def _arrays(cells: dict[tuple[int, int, int], tuple[int, int]], k: int = 2, d: int = 3) -> tuple:
    """(1, K+2, K, D) pass/fail arrays from {(prefix, suffix, bucket): (passes, n)}."""
    p = np.zeros((1, k + 2, k, d), dtype=np.int64)
    f = np.zeros_like(p)
    for (a, b, s), (x, n) in cells.items():
        p[0, a, b, s], f[0, a, b, s] = x, n - x
    return p, f


def test_delta_is_the_handoff_weighted_difference_within_buckets() -> None:
    """Δ = Σ_d w_d (p_AB,d − p_BB,d) with w from the handoff cell, by hand."""
    p, f = _arrays(
        {
            (0, 1, 1): (30, 40),  # A→B, bucket 1: 0.75
            (0, 1, 2): (60, 120),  # A→B, bucket 2: 0.5
            (1, 1, 1): (90, 100),  # B→B: 0.9
            (1, 1, 2): (35, 50),  # B→B: 0.7
        }
    )
    dt = stratified_delta(p, f, min_n=10)
    want = (40 * (0.75 - 0.9) + 120 * (0.5 - 0.7)) / 160
    assert dt.delta[0, 0, 1] == pytest.approx(want)
    var = (40 / 160) ** 2 * (binomial_var(30, 40) + binomial_var(90, 100))
    var += (120 / 160) ** 2 * (binomial_var(60, 120) + binomial_var(35, 50))
    assert dt.var[0, 0, 1] == pytest.approx(var)
    assert dt.coverage[0, 0, 1] == 1.0
    assert not dt.reported[0, 1, 0] and not dt.reported[0, 1, 1]


def test_strata_without_baseline_are_dropped_and_coverage_reported() -> None:
    """A handoff bucket the baseline never saw is dropped; weights renormalize; coverage < 1."""
    p, f = _arrays({(0, 1, 1): (30, 40), (0, 1, 2): (10, 60), (1, 1, 1): (80, 100)})
    dt = stratified_delta(p, f, min_n=10)
    assert dt.delta[0, 0, 1] == pytest.approx(0.75 - 0.8)
    assert dt.coverage[0, 0, 1] == pytest.approx(40 / 100)
    assert dt.n[0, 0, 1] == 100 and dt.n_used[0, 0, 1] == 40


def test_pairs_below_min_n_are_not_reported() -> None:
    """min_n applies to the handoff cell and to its baseline in the strata used."""
    p, f = _arrays({(0, 1, 1): (20, 29), (1, 1, 1): (80, 100), (1, 0, 1): (20, 40), (0, 0, 1): (10, 20)})
    dt = stratified_delta(p, f, min_n=30)
    assert not dt.reported[0, 0, 1] and np.isnan(dt.delta[0, 0, 1])  # handoff n = 29
    assert not dt.reported[0, 1, 0]  # baseline n = 20
    assert stratified_delta(p, f, min_n=20).reported[0, 1, 0]


def test_pool_rules_makes_rule_times_depth_strata() -> None:
    """Pooling over rules keeps rule × depth as strata, so no count is lost or mixed."""
    arr = np.arange(2 * 3 * 2 * 4).reshape(2, 3, 2, 4)
    pooled = pool_rules(arr)
    assert pooled.shape == (1, 3, 2, 8)
    assert pooled.sum() == arr.sum()
    assert sorted(pooled[0, 1, 0].tolist()) == sorted(arr[:, 1, 0].ravel().tolist())


def test_delta_intervals_cover_planted_delta_at_nominal_rate() -> None:
    """Over 240 simulated replicates the 95% intervals cover the planted Δ 92–98% of the time.

    Small cells on purpose (60 handoff turns per pair spread over 6 depth buckets) so
    the normal approximation is stressed; 12 pairs per replicate.
    """
    rng = np.random.default_rng(20261129)
    planted = plant(4, 1, rng)
    truth = planted.mu + planted.pi[:, None] + planted.sigma[None, :]
    z = z_value(0.95)
    hits = []
    for _ in range(240):
        counts = synth_counts(planted, rng, n_pair=60, n_diag=600, n_first=50, n_trans=5)
        cells = build_cells(counts, DepthBuckets())
        dt = stratified_delta(cells.passes, cells.fails, 30)
        ok = dt.reported[0]
        hits.append((np.abs(dt.delta[0] - truth) <= z * np.sqrt(dt.var[0]))[ok])
    coverage = np.concatenate(hits).mean()
    assert 0.92 <= coverage <= 0.98, coverage
