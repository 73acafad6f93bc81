"""Planted parameters: identifiability, curves, stationary adherence, handoff shift."""

from __future__ import annotations

import math

import numpy as np
import pytest

from handoffmon.sim.fleet import Fleet, SimModel, SimRule, default_fleet, make_fleet


def test_default_fleet_plants_zero_sum_influence_and_susceptibility() -> None:
    """π and σ sum to zero (the refit's identifiability constraint), and ember is the risky prefix."""
    fleet = default_fleet()
    assert math.isclose(sum(m.influence for m in fleet.models), 0.0, abs_tol=1e-12)
    assert math.isclose(sum(m.susceptibility for m in fleet.models), 0.0, abs_tol=1e-12)
    assert min(fleet.models, key=lambda m: m.influence).name == "ember"
    assert len(fleet.models) == 6 and len(fleet.rules) == 4


@pytest.mark.parametrize("n_models", [2, 3, 9])
def test_make_fleet_centres_scores_and_routes_fallbacks_to_other_groups(n_models: int) -> None:
    """Random fleets also satisfy the sum-to-zero constraint; fallbacks never point at their own group."""
    fleet = make_fleet(n_models, seed=11)
    assert math.isclose(sum(m.influence for m in fleet.models), 0.0, abs_tol=1e-12)
    assert math.isclose(sum(m.susceptibility for m in fleet.models), 0.0, abs_tol=1e-12)
    for group, chain in fleet.fallbacks.items():
        assert chain and group not in chain and set(chain) <= set(fleet.groups)


def test_curve_follows_markov_recursion_and_converges_to_stationary() -> None:
    """a(d+1) = a(d)(1 − p_tf) + (1 − a(d)) p_ft, tending to p_ft / (p_tf + p_ft)."""
    rule = SimRule("r", "no_commas", tf_scale=2.0)
    m = SimModel("m", "g", base={"r": 0.9}, p_tf=0.05, p_ft=0.3, influence=0.0, susceptibility=0.0)
    c = m.curve(rule, 200)
    assert c[0] == 0.9
    assert math.isclose(c[1], 0.9 * (1 - 0.1) + 0.1 * 0.3)
    assert math.isclose(c[-1], 0.3 / 0.4, rel_tol=1e-9)
    assert math.isclose(m.stationary(rule), 0.75)
    assert np.all(np.diff(c) <= 0) and c[5] < c[0]  # starts above stationary: decays monotonically


def test_handoff_shift_is_mu_plus_prefix_influence_plus_suffix_susceptibility() -> None:
    """Only a change of author shifts adherence; an unknown prefix shifts nothing."""
    fleet = default_fleet()
    a, b = fleet.model("ember"), fleet.model("cedar")
    assert math.isclose(fleet.handoff_shift("ember", "cedar"), fleet.mu + a.influence + b.susceptibility)
    assert fleet.handoff_shift("cedar", "cedar") == 0.0
    assert fleet.handoff_shift("unknown", "cedar") == 0.0


def test_fleet_rejects_ambiguous_topology() -> None:
    """Two models in one group, or a model missing a rule's base adherence, fail at construction."""
    rule = SimRule("r", "no_commas")
    m1 = SimModel("a", "g", base={"r": 0.9}, p_tf=0.1, p_ft=0.3, influence=0, susceptibility=0)
    m2 = SimModel("b", "g", base={"r": 0.9}, p_tf=0.1, p_ft=0.3, influence=0, susceptibility=0)
    with pytest.raises(ValueError, match="group"):
        Fleet(models=(m1, m2), rules=(rule,), mu=0.0, fallbacks={})
    m3 = SimModel("c", "h", base={}, p_tf=0.1, p_ft=0.3, influence=0, susceptibility=0)
    with pytest.raises(ValueError, match="base adherence"):
        Fleet(models=(m1, m3), rules=(rule,), mu=0.0, fallbacks={})
    with pytest.raises(ValueError, match="kind"):
        SimRule("x", "bogus")
