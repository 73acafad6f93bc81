"""Offline counts from the planted model: consistent totals, and the refit recovers the plant from them."""

from __future__ import annotations

from handoffmon.depth import DepthBuckets
from handoffmon.refit import refit
from handoffmon.sim.fleet import default_fleet
from handoffmon.sim.offline import simulate_counts
from handoffmon.sim.recovery import recover
from handoffmon.sim.truth import Truth


def test_offline_counts_are_consistent() -> None:
    """One check per rule per turn; one transition per rule for every turn after a conversation's first."""
    fleet = default_fleet()
    counts = simulate_counts(fleet, 200, seed=4)
    n_rules = len(fleet.rules)
    assert sum(counts.checks.values()) == n_rules * counts.total_turns
    first_turns = sum(n for k, n in counts.turns.items() if k.prefix_model == "none")
    assert first_turns == 200
    assert sum(counts.transitions.values()) == n_rules * (counts.total_turns - first_turns)


def test_refit_of_offline_counts_recovers_planted_scores_at_demo_size() -> None:
    """600 conversations (the demo size): Pearson ≥ 0.9 for π and σ over three seeds."""
    fleet = default_fleet()
    for seed in (1, 2, 3):
        result = refit(simulate_counts(fleet, 600, seed=seed), buckets=DepthBuckets())
        rec = recover(result, Truth.of(fleet))
        assert rec.pearson_pi >= 0.9 and rec.pearson_sigma >= 0.9, (seed, rec.to_dict())
