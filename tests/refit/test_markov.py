"""Markov dynamics: interval coverage on simulated chains, stationary closed form, curve, losses."""

from __future__ import annotations

import math

import numpy as np
import pytest

from handoffmon.counts import CheckKey, Counts, TransitionKey
from handoffmon.depth import DepthBuckets
from handoffmon.refit import RefitResult, refit
from handoffmon.refit.cells import z_value
from handoffmon.refit.markov import curve_losses, fit_markov, half_life, implied_curve
from handoffmon.sim.counting import counts_from_rows
from handoffmon.sim.population import PopModel, Population, simulate


def simulate_transitions(p_tf: float, p_ft: float, a1: float, n_conv: int, turns: int, rng) -> np.ndarray:  # type: ignore[no-untyped-def]
    """(1, 2, 2) transition counts from ``n_conv`` simulated conversations of ``turns`` checks."""
    state = rng.random(n_conv) < a1  # True = pass
    counts = np.zeros((1, 2, 2), dtype=np.int64)
    for _ in range(turns - 1):
        u = rng.random(n_conv)
        nxt = np.where(state, u >= p_tf, u < p_ft)
        for i, f in enumerate((True, False)):
            for j, t in enumerate((True, False)):
                counts[0, i, j] += int(np.sum((state == f) & (nxt == t)))
        state = nxt
    return counts


@pytest.mark.parametrize(("p_tf", "p_ft"), [(0.08, 0.35), (0.2, 0.1)])
def test_markov_intervals_cover_truth_in_at_least_90_percent(p_tf: float, p_ft: float) -> None:
    """200 replicates of 80 conversations × 6 turns: p_TF, p_FT and stationary intervals cover truth ≥ 90%."""
    rng = np.random.default_rng(11)
    z = z_value(0.95)
    stationary = p_ft / (p_tf + p_ft)
    hits = np.zeros(3)
    reps = 200
    for _ in range(reps):
        ma = fit_markov(simulate_transitions(p_tf, p_ft, 0.85, 80, 6, rng), z)
        hits += [
            ma.p_tf_lo[0] <= p_tf <= ma.p_tf_hi[0],
            ma.p_ft_lo[0] <= p_ft <= ma.p_ft_hi[0],
            ma.stationary_lo[0] <= stationary <= ma.stationary_hi[0],
        ]
    coverage = hits / reps
    assert (coverage >= 0.90).all(), coverage


def test_stationary_equals_closed_form_and_is_the_curve_limit() -> None:
    """stationary = p̂_FT / (p̂_TF + p̂_FT) exactly, and the implied curve converges to it."""
    trans = np.array([[[70, 30], [45, 55]]])
    ma = fit_markov(trans, 1.96)
    assert ma.p_tf[0] == pytest.approx(0.3) and ma.p_ft[0] == pytest.approx(0.45)
    assert ma.stationary[0] == pytest.approx(0.45 / 0.75)
    far = implied_curve(np.array([0.9]), ma.p_tf, ma.p_ft, (1, 200))
    assert far[0, 1] == pytest.approx(ma.stationary[0], abs=1e-12)


def test_stationary_is_nan_when_the_chain_never_moves() -> None:
    """p_TF + p_FT = 0: no long run to speak of → NaN (and an infinite half-life)."""
    ma = fit_markov(np.array([[[50, 0], [0, 10]]]), 1.96)
    assert np.isnan(ma.stationary[0]) and np.isnan(ma.stationary_lo[0])
    assert ma.half_life[0] == math.inf


def test_implied_curve_matches_the_recursion_averaged_over_bucket_depths() -> None:
    """Bucket values = mean of a(d) over the bucket's depths, a(d+1) = a(d)(1−p_TF) + (1−a(d))p_FT."""
    p_tf, p_ft, a1 = 0.15, 0.25, 0.95
    a = [a1]
    for _ in range(80):
        a.append(a[-1] * (1 - p_tf) + (1 - a[-1]) * p_ft)
    edges = (1, 2, 3, 5, 9, 17, 33)
    curve = implied_curve(np.array([a1]), np.array([p_tf]), np.array([p_ft]), edges)[0]
    want = [
        np.mean(a[lo - 1 : hi]) for lo, hi in ((1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, 32), (33, 64))
    ]
    np.testing.assert_allclose(curve, want, rtol=0, atol=1e-9)  # recursion accumulates rounding


def test_half_life_halves_the_distance_to_stationary() -> None:
    """After half_life turns |a − s| is half of what it was."""
    p_tf, p_ft = np.array([0.1]), np.array([0.3])
    h = half_life(p_tf, p_ft)[0]
    lam = 1 - 0.1 - 0.3
    assert lam**h == pytest.approx(0.5)
    assert half_life(np.array([0.5]), np.array([0.5]))[0] == 0.0


def test_log_loss_and_mse_are_per_check_cross_entropy_and_brier() -> None:
    """By hand: two buckets, curve 0.8 and 0.6, observed 8/10 and 3/5."""
    ll, mse = curve_losses(np.array([[0.8, 0.6]]), np.array([[8, 3]]), np.array([[10, 5]]))
    want_ll = -(8 * math.log(0.8) + 2 * math.log(0.2) + 3 * math.log(0.6) + 2 * math.log(0.4)) / 15
    want_mse = (8 * 0.2**2 + 2 * 0.8**2 + 3 * 0.4**2 + 2 * 0.6**2) / 15
    assert ll[0] == pytest.approx(want_ll) and mse[0] == pytest.approx(want_mse)


def test_refit_splits_markov_by_handoff_and_pools_unknown_only_in_the_total() -> None:
    """after_handoff uses handoff="true", no_handoff "false"; the pooled fit also counts "unknown"."""
    t = {
        TransitionKey("r", "m", "true", "pass", "fail"): 30,
        TransitionKey("r", "m", "true", "pass", "pass"): 70,
        TransitionKey("r", "m", "false", "pass", "fail"): 10,
        TransitionKey("r", "m", "false", "pass", "pass"): 90,
        TransitionKey("r", "m", "unknown", "pass", "fail"): 20,
        TransitionKey("r", "m", "unknown", "pass", "pass"): 80,
        TransitionKey("r", "m", "false", "fail", "pass"): 40,
        TransitionKey("r", "m", "false", "fail", "fail"): 60,
    }
    checks = {CheckKey("r", "m", "none", "1", "pass"): 90, CheckKey("r", "m", "none", "1", "fail"): 10}
    fit = refit(Counts(checks=checks, transitions=t), buckets=DepthBuckets()).rules["r"]
    # no transition out of fail into a handoff turn: below markov_min_transitions, not published
    assert "m" not in fit.markov_handoff_turns
    same = fit.markov_same_author["m"]
    assert same.p_tf == pytest.approx(0.1) and same.turns == "same_author"
    assert (same.n_from_pass, same.n_from_fail) == (100, 100)
    assert same.stationary_ci[0] <= same.stationary <= same.stationary_ci[1]
    pooled = fit.markov["m"]
    assert pooled.p_tf == pytest.approx(60 / 300) and pooled.n_transitions == 400
    assert pooled.stationary == pytest.approx(0.4 / (0.2 + 0.4))
    assert pooled.initial == pytest.approx(0.9)
    assert fit.curves["m"].fitted[0] == pytest.approx(0.9)


def _markov_fit(rows):  # type: ignore[no-untyped-def]
    from handoffmon.depth import DepthBuckets
    from handoffmon.sim.counting import counts_from_rows

    buckets = DepthBuckets()
    return refit(counts_from_rows(rows, buckets), buckets=buckets, now=0).rules["r"].markov["m"]


def test_markov_intervals_are_not_inflated_by_the_chains_own_persistence() -> None:
    """Every conversation runs the same chain (p_TF 0.1, p_FT 0.4): transitions out of a state
    are independent trials and the Wilson interval on raw counts is the right width. Dividing
    the counts by the verdicts' design effect (≈ 2.7 here, almost all of it the chain's own
    persistence λ = 0.5) made the intervals 1.63× too wide, covering 100% of the time; the
    transition design effect discounts that persistence: width within 15% of Wilson's."""
    from handoffmon.refit.intervals import wilson
    from tests.refit.markov_rows import markov_rows

    ratios = []
    for seed in range(12):
        rows, _, _ = markov_rows(1500, 0.0, seed)
        fit = _markov_fit(rows)
        lo, hi = wilson(np.array(fit.p_tf * fit.n_from_pass), np.array(float(fit.n_from_pass)), 1.959964)
        ratios.append((fit.p_tf_ci[1] - fit.p_tf_ci[0]) / float(hi - lo))
    assert float(np.mean(ratios)) < 1.15


@pytest.mark.slow
def test_markov_intervals_cover_the_population_chain_when_conversations_differ() -> None:
    """Conversations' logit p_TF and p_FT spread with SD 0.7 around 0.1 and 0.4: the transition
    counts are over-dispersed and the intervals must widen for it. Over 50 replicates (3
    intervals each) coverage of the population values stays in [0.90, 0.99] (measured 0.95
    over 150; raw Wilson counts: 0.89; the verdicts' design effect: 1.00)."""
    from tests.refit.markov_rows import markov_rows, truth

    tf, ft = truth(0.7)
    st = ft / (tf + ft)
    hits = []
    for seed in range(50):
        rows, _, _ = markov_rows(1500, 0.7, seed)
        fit = _markov_fit(rows)
        hits += [
            fit.p_tf_ci[0] <= tf <= fit.p_tf_ci[1],
            fit.p_ft_ci[0] <= ft <= fit.p_ft_ci[1],
            fit.stationary_ci[0] <= st <= fit.stationary_ci[1],
        ]
    assert 0.90 <= float(np.mean(hits)) <= 0.99


def test_a_fallback_that_never_opens_a_conversation_gets_a_curve() -> None:
    """A model routed to only on handoffs is never checked at depth 1. Its chain is published,
    but its curve, log loss and MSE were NaN (started at a depth-1 adherence it has none of).
    The curve now starts at its first bucket's observed adherence and is null before it; the
    model that opens conversations keeps its depth-1 start."""
    models = (PopModel("main", base=0.9, decay=0.004), PopModel("fallback", base=0.85, start=0.0))
    pop = Population(models=models, handoff_rate=0.1, pingpong_share=0.0)
    result = refit(counts_from_rows(simulate(pop, 3000, seed=1)), buckets=DepthBuckets(), now=0)
    fit = result.rules["rule_a"]
    curve, chain = fit.curves["fallback"], fit.markov["fallback"]
    assert curve.n[0] == 0 and curve.n[1] > 500 and math.isnan(chain.initial)
    assert math.isnan(curve.fitted[0]) and curve.fitted[1] == pytest.approx(curve.adherence[1], abs=0.02)
    assert all(0.0 <= v <= 1.0 for v in curve.fitted[1:])
    assert curve.fitted[-1] == pytest.approx(chain.stationary, abs=1e-6)  # deep buckets: at the chain's level
    assert math.isfinite(chain.log_loss) and 0.0 < chain.mse < 0.25
    main = fit.curves["main"]
    assert main.fitted[0] == pytest.approx(fit.markov["main"].initial) == pytest.approx(main.adherence[0])
    back = RefitResult.from_json(result.to_json()).rules["rule_a"].curves["fallback"]
    assert math.isnan(back.fitted[0]) and back.fitted[1:] == curve.fitted[1:]
