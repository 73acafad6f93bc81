"""Per-turn compliance draws follow the planted equations."""

from __future__ import annotations

import math

import numpy as np

from handoffmon.sim.dynamics import CLIP_HIGH, Dynamics
from handoffmon.sim.fleet import default_fleet


def test_probabilities_at_depth_one_same_author_and_handoff() -> None:
    """Depth 1 → base; same author → chain on the previous verdict; handoff → own curve + shift."""
    fleet = default_fleet()
    dyn = Dynamics(fleet)
    rule = fleet.rules[1]
    cedar = fleet.model("cedar")
    p1 = dyn.probabilities("cedar", None, 1, None)[rule.name]
    assert p1 == cedar.base[rule.name]
    stay = dyn.probabilities("cedar", "cedar", 5, {r.name: True for r in fleet.rules})[rule.name]
    assert math.isclose(stay, 1 - cedar.p_tf_for(rule))
    back = dyn.probabilities("cedar", "cedar", 5, {r.name: False for r in fleet.rules})[rule.name]
    assert math.isclose(back, cedar.p_ft)
    hand = dyn.probabilities("cedar", "ember", 5, {r.name: True for r in fleet.rules})[rule.name]
    expected = cedar.curve(rule, 5)[4] + fleet.handoff_shift("ember", "cedar")
    assert math.isclose(hand, expected)


def test_handoff_probability_is_clipped() -> None:
    """A shift beyond [0, 1] is clipped into the documented range."""
    fleet = default_fleet()
    dyn = Dynamics(fleet)
    big = type(fleet)(models=fleet.models, rules=fleet.rules, mu=5.0, fallbacks=fleet.fallbacks)
    p = Dynamics(big).probabilities("atlas", "birch", 3, None)
    assert all(v == CLIP_HIGH for v in p.values())
    assert dyn.own_adherence("atlas", fleet.rules[0].name, 10_000) > 0  # past max_depth: last value


def test_draw_frequencies_match_probabilities() -> None:
    """20,000 draws of a handoff turn pass at the planted rate (4-sigma binomial tolerance)."""
    fleet = default_fleet()
    dyn = Dynamics(fleet)
    rng = np.random.default_rng(0)
    n = 20_000
    probs = dyn.probabilities("birch", "ember", 4, None)
    hits = {r: 0 for r in probs}
    for _ in range(n):
        for r, ok in dyn.draw("birch", "ember", 4, None, rng).items():
            hits[r] += ok
    for r, p in probs.items():
        assert abs(hits[r] / n - p) < 4 * math.sqrt(p * (1 - p) / n)
