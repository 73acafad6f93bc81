"""Routing that follows failed checks: the refit sees it in the transition counters and says so."""

from __future__ import annotations

import json
import math

import numpy as np

from handoffmon.counts import Counts
from handoffmon.depth import DepthBuckets
from handoffmon.refit import OBSERVATIONAL_NOTE, refit
from handoffmon.refit.routing_check import verdict_routing
from handoffmon.sim.calibration import standard_population
from handoffmon.sim.counting import counts_from_rows
from handoffmon.sim.population import PopModel, Population, simulate
from tests.refit.verdict_routing import verdict_routed_rows

BUCKETS = DepthBuckets()


def test_handoffs_after_failures_are_flagged_and_the_note_warns() -> None:
    """30% of failed turns handed off against 8% of passed ones, no handoff effect anywhere:
    every Δ comes out negative (the known bias), and the refit flags the routing (ratio ≈ 3.75,
    its interval excludes 1.25) and appends the warning to the note the report shows."""
    result = refit(
        counts_from_rows(verdict_routed_rows(3000, after_fail=0.3, after_pass=0.08, seed=1)),
        buckets=BUCKETS,
        now=0,
    )
    fit = result.rules["r"]
    deltas = [p.delta for p in fit.pairs if p.observed]
    assert len(deltas) == 6 and float(np.mean(deltas)) < -0.01  # the bias the warning is about
    assert fit.verdict_routing and result.rules["all"].verdict_routing
    lo, hi = fit.handoff_after_fail_ci
    assert 1.25 < lo <= 3.75 <= hi
    assert result.note.startswith(OBSERVATIONAL_NOTE) and "followed failed checks 3.8x" in result.note
    doc = json.loads(result.to_json())
    assert doc["rules"]["r"]["verdict_routing"] is True


def test_routing_blind_to_verdicts_is_not_flagged() -> None:
    """Same conversations, handoffs at 8% whatever the verdict: ratio ≈ 1, note unchanged."""
    result = refit(
        counts_from_rows(verdict_routed_rows(3000, after_fail=0.08, after_pass=0.08, seed=1)),
        buckets=BUCKETS,
        now=0,
    )
    fit = result.rules["r"]
    assert not fit.verdict_routing and fit.handoff_after_fail_ci[0] <= 1.0 <= fit.handoff_after_fail_ci[1]
    assert result.note == OBSERVATIONAL_NOTE


def test_calibration_population_is_not_flagged() -> None:
    """Depth-dependent failures and bucket-end handoffs, routing blind to verdicts (ping-pong
    conversations included): no fit is flagged."""
    result = refit(
        counts_from_rows(simulate(standard_population(rules=2), 3000, seed=3)), buckets=BUCKETS, now=0
    )
    assert not any(f.verdict_routing for f in result.rules.values())
    assert all(0.85 < f.handoff_after_fail_ratio < 1.15 for f in result.rules.values())
    assert result.note == OBSERVATIONAL_NOTE


def test_no_transitions_gives_nan_not_a_flag() -> None:
    """Counts without transitions (a cells.csv source): NaN ratio, null in JSON, no flag."""
    rows = verdict_routed_rows(500, after_fail=0.3, after_pass=0.08, seed=2)
    counts = counts_from_rows(rows)
    bare = Counts(checks=counts.checks, cell_stats=counts.cell_stats, baseline_checks=counts.baseline_checks)
    result = refit(bare, buckets=BUCKETS, now=0)
    fit = result.rules["r"]
    assert math.isnan(fit.handoff_after_fail_ratio) and not fit.verdict_routing
    assert json.loads(result.to_json())["rules"]["r"]["handoff_after_fail_ratio"] is None
    empty = verdict_routing(np.zeros((0, 3, 2, 2)), np.zeros(0), 1.96)
    assert math.isnan(empty.ratio) and not empty.flagged


def test_a_deployment_without_handoffs_is_not_flagged() -> None:
    """One model, no handoff ever, 99.5% adherence: the after-fail/after-pass ratio is 0/0. With
    ½ added to each count it came out as the pass/fail imbalance (inf, interval from 4.2), the
    fit was flagged and the note warned that handoffs followed failures."""
    pop = Population(models=(PopModel("solo", base=0.995, decay=0.0),), conversation_sd=0.0, turn_sd=0.0)
    counts = counts_from_rows(simulate(pop, 3000, seed=1))
    fails_then = sum(v for k, v in counts.transitions.items() if k.from_verdict == "fail")
    assert fails_then >= 30 and not any(k.handoff == "true" for k in counts.transitions)
    result = refit(counts, buckets=BUCKETS, now=0)
    for fit in result.rules.values():
        assert math.isnan(fit.handoff_after_fail_ratio) and not fit.verdict_routing
    assert result.note == OBSERVATIONAL_NOTE
    assert json.loads(result.to_json())["rules"]["all"]["handoff_after_fail_ci"] == [None, None]
