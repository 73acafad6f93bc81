"""Per-turn compliance decisions of the planted model (see ``fleet`` for the equations)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from handoffmon.sim.fleet import Fleet

CLIP_LOW, CLIP_HIGH = 0.01, 0.99
"""Handoff-turn pass probabilities are clipped into this range."""


class Dynamics:
    """Decides, per rule, whether a reply should comply, from author, prefix and depth.

    Args:
        fleet: the planted world.
    """

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self._curves = {
            (m.name, r.name): m.curve(r, fleet.max_depth) for m in fleet.models for r in fleet.rules
        }

    def own_adherence(self, model: str, rule: str, depth: int) -> float:
        """a_model(depth): the model's own curve (depths past ``max_depth`` use the last value)."""
        curve = self._curves[(model, rule)]
        return float(curve[min(max(depth, 1), len(curve)) - 1])

    def probabilities(
        self, author: str, prefix: str | None, depth: int, previous: Mapping[str, bool] | None
    ) -> dict[str, float]:
        """P(comply) per rule for a turn by ``author`` at ``depth`` after ``prefix``.

        Args:
            author: canonical name of the model writing the turn.
            prefix: author of the previous turn (None at depth 1).
            depth: 1-based depth of the turn.
            previous: the previous turn's intended verdicts per rule (None at depth 1).
        """
        model = self.fleet.model(author)
        out: dict[str, float] = {}
        for rule in self.fleet.rules:
            if prefix is None or depth <= 1:
                p = model.base[rule.name]
            elif prefix == author and previous is not None and rule.name in previous:
                p = 1.0 - model.p_tf_for(rule) if previous[rule.name] else model.p_ft_for(rule)
            else:
                # answer stability under challenge is planted per model only (no handoff effect)
                shift = 0.0 if rule.kind == "answer_stability" else self.fleet.handoff_shift(prefix, author)
                p = float(np.clip(self.own_adherence(author, rule.name, depth) + shift, CLIP_LOW, CLIP_HIGH))
            out[rule.name] = p
        return out

    def draw(
        self,
        author: str,
        prefix: str | None,
        depth: int,
        previous: Mapping[str, bool] | None,
        rng: np.random.Generator,
    ) -> dict[str, bool]:
        """Sample the intended verdict (True = comply) of every rule for one turn."""
        probs = self.probabilities(author, prefix, depth, previous)
        u = rng.random(len(probs))
        return {name: bool(ui < p) for (name, p), ui in zip(probs.items(), u, strict=True)}
