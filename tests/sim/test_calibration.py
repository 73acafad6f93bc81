"""What an alert promises, measured on the production-like population (docs/concepts/alert-promises.md).

Default run: few replicates, assertions at the promise plus three binomial standard errors
at that replicate count (a correct method fails them with probability < 0.2%). The
``slow`` tests run enough replicates for the promised numbers themselves:
``scripts/calibrate.py`` prints the same table.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from handoffmon.config import RefitConfig
from handoffmon.depth import DepthBuckets
from handoffmon.refit import refit
from handoffmon.sim.calibration import PLANTED_HARM, calibrate, standard_population
from handoffmon.sim.counting import counts_from_rows
from handoffmon.sim.population import Population, simulate

HARMFUL = (("atlas", "birch"), ("dune", "cedar"))


def _upper(promise: float, n: int) -> float:
    return promise + 3 * math.sqrt(promise * (1 - promise) / max(n, 1))


def test_population_has_the_production_features() -> None:
    """Canary in ~20 turns, suffix-only model never a prefix, handoffs bunched at bucket ends,
    ping-pong conversations, planted effect visible in the estimand."""
    pop = standard_population(harmful=HARMFUL)
    rows = simulate(pop, 3000, seed=1)
    one_rule = rows.rule == 0
    names = pop.names
    canary_turns = int(np.sum(one_rule & (rows.model == names.index("canary"))))
    assert 5 <= canary_turns <= 45
    assert not np.any(rows.prefix == names.index("escalate"))
    assert np.any(rows.model == names.index("escalate"))
    ends = {lo - 1 for lo in DepthBuckets().edges[1:]}
    hand = rows.handoff & one_rule
    at_end = np.isin(rows.depth[hand], list(ends)).mean()
    assert at_end > 0.4  # 11 of ~100 depths, boosted ×4
    truth = __import__("handoffmon.sim.population", fromlist=["expected_delta"]).expected_delta(rows, rule=0)
    a, b = names.index("atlas"), names.index("birch")
    assert truth[a, b] == pytest.approx(PLANTED_HARM, abs=0.02)


def test_planted_null_false_significant_and_coverage() -> None:
    """Null: per-pair false rate ≤ 0.06, refits with a false pair ≤ 0.10, coverage 0.93–0.97."""
    cal = calibrate(standard_population(), replicates=8, conversations=2500, seed=101)
    assert cal.null_pairs >= 100
    assert cal.false_rate <= _upper(0.06, cal.null_pairs)
    assert cal.familywise <= _upper(0.10, cal.replicates)
    half = 3 * math.sqrt(0.05 * 0.95 / cal.reported)
    assert 0.93 - half <= cal.coverage <= 0.97 + half


def test_planted_harm_is_found() -> None:
    """Two −15 pp pairs among 20: found (significant, negative) in ≥ 90% of refits."""
    cal = calibrate(standard_population(harmful=HARMFUL), replicates=4, conversations=8000, seed=202)
    assert cal.harmful_pairs == 8
    assert cal.power >= 0.9 - 3 * math.sqrt(0.9 * 0.1 / cal.harmful_pairs)


def _se_by_model(pop: Population, rows, min_n: int) -> dict[str, tuple[float, float]]:  # type: ignore[no-untyped-def]
    result = refit(counts_from_rows(rows), buckets=DepthBuckets(), settings=RefitConfig(min_n=min_n), now=0)
    fit = result.rules[pop.rules[0]]
    return {m: (s.prefix_influence_se, s.suffix_susceptibility_se) for m, s in fit.models.items()}


@pytest.mark.parametrize("min_n", [30, 5])
def test_a_20_turn_canary_moves_no_other_models_se(min_n: int) -> None:
    """Refit with and without the conversations the canary touched: every other model's π/σ SE
    changes by < 20% (also with min_n = 5, where the canary's pairs enter the decomposition)."""
    pop = standard_population()
    rows = simulate(pop, 4000, seed=5)
    canary = pop.names.index("canary")
    touched = np.unique(rows.conversation[rows.model == canary])
    keep = ~np.isin(rows.conversation, touched)
    columns = ("conversation", "depth", "model", "prefix", "rule", "verdict", "shift", "mean", "handoff")
    without = replace(rows, **{f: getattr(rows, f)[keep] for f in columns})
    with_c, without_c = _se_by_model(pop, rows, min_n), _se_by_model(pop, without, min_n)
    for m, (pi_se, sigma_se) in without_c.items():
        if m == "canary" or not np.isfinite(sigma_se):
            continue
        assert with_c[m][1] == pytest.approx(sigma_se, rel=0.2), m
        if np.isfinite(pi_se):
            assert with_c[m][0] == pytest.approx(pi_se, rel=0.2), m


@pytest.mark.slow
def test_promises_hold_over_many_replicates() -> None:
    """The published numbers: 200 null refits, 100 refits with planted harm."""
    null = calibrate(standard_population(), replicates=200, conversations=3000, seed=1)
    assert null.false_rate <= 0.06
    assert null.familywise <= 0.10
    assert 0.93 <= null.coverage <= 0.97
    harm = calibrate(standard_population(harmful=HARMFUL), replicates=100, conversations=8000, seed=2)
    assert harm.power >= 0.90
    assert 0.93 <= harm.coverage <= 0.97


@pytest.mark.slow
def test_pairs_into_the_model_near_100_percent_hold_no_effect() -> None:
    """120 null refits: the Δ intervals of the pairs into atlas (97% adherence, the ping-pong
    partner whose handoffs sit deep) hold 0. On Kish's effective n with a pooled p(1 − p) they
    held it 440 of 480 times (0.917; the interval 1.2–1.4× narrower than the pairs' own se);
    with the arms' n matched to their stratified variance 457 (0.952). Bound: 0.95 less two
    binomial SEs at this count (0.930)."""
    pop, buckets = standard_population(), DepthBuckets()
    covered = total = 0
    for i in range(120):
        rows = simulate(pop, 3000, seed=np.random.default_rng([11, i]))
        fit = refit(counts_from_rows(rows, buckets), buckets=buckets, now=0.0).rules[pop.rules[0]]
        for p in fit.pairs:
            if p.observed and p.model == "atlas":
                total += 1
                covered += p.ci_low <= 0.0 <= p.ci_high
    assert total >= 400
    assert covered / total >= 0.95 - 2 * math.sqrt(0.05 * 0.95 / total), (covered, total)
