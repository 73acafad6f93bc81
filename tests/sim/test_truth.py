"""Planted truth: Δ from π/σ/μ, clipping-aware expected Δ, Pearson helper, JSON form."""

from __future__ import annotations

import dataclasses
import json
import math

from handoffmon.sim.fleet import default_fleet
from handoffmon.sim.truth import Truth, expected_delta, pearson


def test_truth_delta_is_mu_plus_influence_plus_susceptibility() -> None:
    """Truth.delta reads the fleet's planted numbers; the diagonal is 0."""
    fleet = default_fleet()
    truth = Truth.of(fleet)
    assert math.isclose(truth.delta("ember", "cedar"), fleet.mu - 0.17 - 0.14)
    assert truth.delta("atlas", "atlas") == 0.0
    assert json.loads(json.dumps(truth.to_dict()))["models"]["ember"]["prefix_influence"] == -0.17


def test_expected_delta_equals_planted_shift_without_clipping_and_less_with_it() -> None:
    """No clipping in the default fleet: expected Δ = μ + π + σ; a huge μ is clipped at 0.99."""
    fleet = default_fleet()
    rule = fleet.rules[0].name
    mix = {2: 1.0, 5: 2.0, 12: 1.0}
    assert math.isclose(
        expected_delta(fleet, "ember", "cedar", rule, mix), fleet.handoff_shift("ember", "cedar")
    )
    big = dataclasses.replace(fleet, mu=0.5)
    got = expected_delta(big, "atlas", "birch", rule, mix)
    assert 0 < got < big.handoff_shift("atlas", "birch")


def test_pearson_is_nan_for_constant_or_short_inputs() -> None:
    """Correlation is undefined for constants and fewer than 3 points."""
    assert math.isnan(pearson([1, 1, 1], [1, 2, 3]))
    assert math.isnan(pearson([1, 2], [1, 2]))
    assert math.isclose(pearson([1, 2, 3], [2, 4, 6.5]), 0.9986, abs_tol=1e-3)
