"""The shipped alert expressions on wide, production-like fleets with no handoff effect.

``tests/sim/test_calibration.py`` scores ``significant`` on the six-model calibration
population. The pages threshold the exported intervals instead (HandoffPairRisky: Δ's upper
bound < −0.05 from ≥ 100 checked turns, or risk + 1.96·SE < −0.15; HandoffsIntoModelHurt: Δ
into B's upper bound < −0.05), and a deployment has more models than six: here K = 16 models
with Zipf-like routing, three routed to 150× less often than the first (each under 1% of
turns), per-conversation difficulty with SD 12 pp, turn noise that persists (AR(1) ρ = 0.95),
6% ping-pong conversations, handoffs bunched at depth-bucket ends and depth decay
(``sim.alert_calibration``). Nothing is planted, so every page is false.

Measured (``scripts/alert_calibration.py``; 200 refits each, 4,000–8,000 conversations; pages
per no-effect pair or model):

| world | Δ pair pages | risk pages | Δ into B pages | refits paging | Δ cover | into B holds 0 |
|---|---|---|---|---|---|---|
| K = 10, ρ 0.8, SD 8 pp | 9e-5 (1 of 10,664) | 0 | 0 of 1,609 | 0.005 | 0.972 | 0.963 |
| K = 20, ρ 0.8, SD 8 pp | 1.4e-4 (3 of 21,972) | 0 | 0 of 3,414 | 0.015 | 0.970 | 0.950 |
| K = 30, ρ 0.8, SD 8 pp (150 refits) | 0 of 20,422 | 0 of 96,383 | 0 of 3,915 | 0 | 0.975 | 0.963 |
| K = 10, ρ 0.95, SD 12 pp | 3.8e-4 (4 of 10,664) | 0 | 6e-4 (1 of 1,609) | 0.025 | 0.964 | 0.952 |

With three rules and every fit paged (each rule's and ``all``), the Δ interval alone paged
0.02 (K = 10) and 0.19 (K = 20, ρ 0.95, SD 12 pp, 100 refits) of refits: about 550 no-effect
pairs per refit, while the Δ branch paged 20 times where the reported SEs predict 29
(``pair_pages_expected``): multiplicity, not narrow intervals. The shipped Δ branch also
requires ``significant`` (Benjamini–Hochberg over the fit's pairs): 0.007 and 0.04 of refits
(the K = 20 figure half HandoffsIntoModelHurt's, which has no such gate).

The promise (``docs/concepts/alert-promises.md``): a no-effect pair or model pages at most
0.001 of the time (per pair, per model), a refit of one rule pages on anything with no effect
at most 5% of the time, and the Δ branch pages no more often than its SEs predict. The
default run keeps 30 refits and asserts each rate at the promise plus three binomial
standard errors at its count; the ``slow`` test runs 200.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from handoffmon.depth import DepthBuckets
from handoffmon.sim.alert_calibration import AlertTally, alert_calibration, wide_population
from handoffmon.sim.calibration import standard_population
from handoffmon.sim.counting import counts_from_rows, counts_from_rows_fast
from handoffmon.sim.population import simulate

PER_PAIR = 0.001
"""Promise: a no-effect pair (or model, for Δ into B) pages at most this often."""
PER_REFIT = 0.05
"""Promise: a refit pages on some no-effect pair or model at most this often."""
SPARSE = 3


def _upper(promise: float, n: int) -> float:
    return promise + 3 * math.sqrt(promise * (1 - promise) / max(n, 1))


def _world() -> object:
    return wide_population(16, sparse=SPARSE, turn_rho=0.95, conversation_sd=0.12)


def _assert_promises(t: AlertTally) -> None:
    assert t.pair_null >= 50 * t.replicates and t.into_null >= 8 * t.replicates
    assert max(t.sparse_share) < 0.01  # the sparse models are under 1% of turns, and seen
    assert t.pair_null_fired / t.pair_null <= _upper(PER_PAIR, t.pair_null), t.summary()
    assert t.risk_null_fired / max(t.risk_null, 1) <= _upper(PER_PAIR, t.risk_null), t.summary()
    assert t.into_null_fired / t.into_null <= _upper(PER_PAIR, t.into_null), t.summary()
    assert t.refits_firing / t.replicates <= _upper(PER_REFIT, t.replicates), t.summary()
    # the Δ branch's interval (without its BH gate) against what the reported SEs predict
    # under a normal Δ̂ (Poisson bound λ + 3√λ + 1): more would be a tail thinner than the
    # intervals claim
    lam = t.pair_null_expected
    assert t.pair_null_fired <= t.pair_null_interval_fired <= lam + 3 * math.sqrt(lam) + 1, t.summary()
    # the intervals behind the pages: calibrated or wide, never narrow
    half = 3 * math.sqrt(0.05 * 0.95 / t.reported)
    assert t.covered / t.reported >= 0.95 - half, t.summary()
    half = 3 * math.sqrt(0.05 * 0.95 / t.into_null)
    assert t.into_null_covered / t.into_null >= 0.95 - half, t.summary()


def test_fast_counting_equals_the_reference_aggregation_key_for_key() -> None:
    """The Monte Carlo's counts (``counts_from_rows_fast``) are the turn-level reference's
    (``counts_from_rows``, itself equal to a live Monitor's), on a wide fleet and on the
    three-rule calibration population (pooled sums, ping-pong, canary, suffix-only model)."""
    for pop in (_world(), standard_population(rules=3)):
        rows = simulate(pop, 1500, seed=4)  # type: ignore[arg-type]
        fast, slow = counts_from_rows_fast(rows, DepthBuckets()), counts_from_rows(rows, DepthBuckets())
        for kind in ("checks", "baseline_checks", "cell_stats", "transitions", "turns", "session_lengths"):
            assert getattr(fast, kind) == getattr(slow, kind), kind
        assert fast.cell_stats  # not two empty tables


def test_no_effect_pages_rarely_on_a_wide_fleet_with_sparse_models() -> None:
    t = alert_calibration(_world(), replicates=30, conversations=4000, seed=31, sparse=SPARSE)  # type: ignore[arg-type]
    _assert_promises(t)


@pytest.mark.slow
@pytest.mark.timeout(900)  # 100 refits of 6,000 conversations, four fits each: ~90 s alone
def test_three_rules_every_fit_paged_page_at_most_5pct_of_no_effect_refits() -> None:
    """K = 20, three rules, each rule's fit and ``all`` paged: ~550 no-effect pairs a refit.
    The intervals alone paged 19 of 100 refits (multiplicity); with the BH gates (``significant``
    for HandoffPairRisky's Δ branch, ``into_significant`` for HandoffsIntoModelHurt, as shipped)
    3 of 100 (1 of them HandoffsIntoModelHurt, 2 of 6,979 no-effect models on its interval
    alone, 1 with its gate). Asserted at 5% + 3 binomial SE at 100 refits (0.115)."""
    pop = wide_population(20, sparse=3, rules=3, turn_rho=0.95, conversation_sd=0.12)
    t = alert_calibration(pop, replicates=100, conversations=6000, seed=1, sparse=3, every_fit=True)
    assert t.refits_firing / t.replicates <= _upper(PER_REFIT, t.replicates), t.summary()
    assert t.pair_null_fired / t.pair_null <= _upper(PER_PAIR, t.pair_null), t.summary()
    # the gate removes pages the interval alone gives (what the test is about)
    assert t.refits_firing_ungated > t.refits_firing, t.summary()
    assert t.into_null_interval_fired > t.into_null_fired, t.summary()


@pytest.mark.slow
@pytest.mark.timeout(1200)  # 200 refits of 8,000 conversations at K = 30: 4-8 min on a shared core
@pytest.mark.parametrize(
    ("k", "sparse", "rho", "sd", "conversations"),
    [(16, 3, 0.95, 0.12, 4000), (30, 4, 0.8, 0.08, 8000)],
)
def test_no_effect_pages_rarely_over_many_refits(
    k: int, sparse: int, rho: float, sd: float, conversations: int
) -> None:
    pop = wide_population(k, sparse=sparse, turn_rho=rho, conversation_sd=sd)
    t = alert_calibration(pop, replicates=200, conversations=conversations, seed=32, sparse=sparse)
    _assert_promises(t)


def test_the_wide_world_is_what_it_claims() -> None:
    """Sparse models, persistent noise and heterogeneous conversations are really there: the
    three sparse models each write under 1% of turns yet appear, the busiest model several
    times the tenth's share, and a conversation's verdicts are correlated (same-conversation
    pass indicators of consecutive turns correlate above 0.05)."""
    pop = _world()
    rows = simulate(pop, 4000, seed=5)  # type: ignore[arg-type]
    share = np.bincount(rows.model, minlength=16) / len(rows)
    assert np.all(share[-SPARSE:] > 0) and np.all(share[-SPARSE:] < 0.01)
    assert share[0] > 3 * share[9]
    ok = rows.verdict < 2
    order = np.lexsort((rows.depth[ok], rows.conversation[ok]))
    c, y = rows.conversation[ok][order], (rows.verdict[ok][order] == 0).astype(float)
    same = c[1:] == c[:-1]
    assert np.corrcoef(y[1:][same], y[:-1][same])[0, 1] > 0.05
