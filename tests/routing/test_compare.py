"""The paired conversation bootstrap behind "adherence saved by reordering", and the summary line."""

from __future__ import annotations

import math
import re

import numpy as np

from handoffmon.routing.compare import ArmTotals, RoutingComparison, paired_difference


def test_identical_runs_differ_by_exactly_zero() -> None:
    """Two identical runs (what a missing table gives): estimate 0, interval [0, 0]."""
    rng = np.random.default_rng(1)
    n = rng.integers(0, 6, 200).astype(float)
    p = rng.binomial(n.astype(int), 0.8).astype(float)
    assert paired_difference(p, n, p, n) == (0.0, 0.0, 0.0)


def test_no_checks_in_an_arm_is_nan_not_zero() -> None:
    """An empty comparison is not "no difference"."""
    z = np.zeros(10)
    est, lo, hi = paired_difference(z, z, z, z)
    assert math.isnan(est) and math.isnan(lo) and math.isnan(hi)


def test_interval_covers_a_known_shift_at_the_nominal_rate() -> None:
    """Planted +5 pp on fallback turns, conversations with a shared random level (clustered turns):
    the 95% interval covers +5 pp in 93–99 of 100 seeded replications (binomial 95% band)."""
    covered = 0
    for rep in range(100):
        rng = np.random.default_rng(rep)
        n = rng.integers(1, 6, 150)
        level = np.clip(rng.normal(0.75, 0.12, 150), 0.05, 0.9)
        a = rng.binomial(n, level).astype(float)
        b = rng.binomial(n, level + 0.05).astype(float)
        nf = n.astype(float)
        _, lo, hi = paired_difference(a, nf, b, nf, resamples=600, seed=rep)
        covered += lo <= 0.05 <= hi
    assert 90 <= covered <= 99


def test_summary_line_has_the_promised_shape() -> None:
    arm = ArmTotals(turns=100, fallback_turns=10, checks=40, passes=30, fallback_attempts=12)
    cmp = RoutingComparison(50, arm, ArmTotals(100, 10, 40, 33, fallback_attempts=13), 7.5, 1.25, 13.0, 6.0)
    pattern = (
        r"^Risk-aware ordering: adherence after fallbacks \+7\.5 pp \[\+1\.2, \+13\.0\] "
        r"vs the router.s order "
        r"\(predicted \+6\.0 pp\), cost \+1 fallback attempts \(\+8\.3%\), \+0 failed turns, \$\+0\.0000$"
    )
    assert re.match(pattern, cmp.line()), cmp.line()
