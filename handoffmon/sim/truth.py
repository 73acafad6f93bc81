"""Planted truth as numbers comparable with a refit: π, σ, μ, expected Δ, Markov and stationary.

How the planted values map to what the refit estimates:

* **π, σ, μ** — a handoff turn A→B at depth d passes with ``clip(a_B(d) + μ + π_A + σ_B)``
  (``fleet``), so its expected Δ against B's own depth-d adherence is exactly
  ``μ + π_A + σ_B`` whenever no clipping happens (the default fleet never clips). π and
  σ are planted with zero sum, the refit's identifiability constraint, so they compare
  directly with ``ModelScores.prefix_influence`` / ``suffix_susceptibility``.
* **Attenuation of σ (before the clean baseline)** — a baseline of *all* of B's same-author turns,
  which includes turns shortly after an earlier handoff into B whose shifted verdict is
  still decaying back (factor ``1 − p_tf − p_ft`` per turn). That adds
  ``−c_B (μ + π̄ + σ_B)`` to every Δ(·→B), with c_B ≈ h λ / (1 − λ (1 − h)) for handoff
  share h and λ = 1 − p_tf − p_ft: about 0.3 at the demo's 35% handoff turns. The
  estimated σ is a shrunk, shifted copy of the planted one (the default demo measured a
  slope of 0.70 for σ and 0.88 for π, the latter from the refit's ridge alone). The refit
  now reads B's **clean** baseline (same-author turns whose history holds no other
  model's text, ``Counts.baseline_checks``), which removes this term. A linear
  shrink leaves Pearson correlation unchanged, which is why recovery is scored by
  Pearson and levels are not compared exactly.
* **Markov** — same-author transitions follow each model's chain exactly, so the
  refit's ``markov_same_author[model]`` for a rule estimates ``p_tf[m, r]``, ``p_ft[m]`` and
  ``stationary = p_ft / (p_tf + p_ft)`` without bias.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from handoffmon.sim.dynamics import CLIP_HIGH, CLIP_LOW
from handoffmon.sim.fleet import Fleet


@dataclass(frozen=True)
class PlantedModel:
    """One model's planted numbers.

    Attributes:
        influence: π.
        susceptibility: σ.
        p_tf: per rule.
        p_ft: per rule (the model's p_ft for every chain rule; 1 − flip rate for answer stability).
        stationary: per rule, p_ft / (p_tf + p_ft).
        base: depth-1 adherence per rule.
    """

    influence: float
    susceptibility: float
    p_tf: Mapping[str, float]
    p_ft: Mapping[str, float]
    stationary: Mapping[str, float]
    base: Mapping[str, float]


@dataclass(frozen=True)
class Truth:
    """Everything planted, keyed like a refit result."""

    mu: float
    models: Mapping[str, PlantedModel]
    rules: tuple[str, ...]

    @classmethod
    def of(cls, fleet: Fleet) -> Truth:
        """Read the planted numbers off a fleet."""
        models = {
            m.name: PlantedModel(
                influence=m.influence,
                susceptibility=m.susceptibility,
                p_tf={r.name: m.p_tf_for(r) for r in fleet.rules},
                p_ft={r.name: m.p_ft_for(r) for r in fleet.rules},
                stationary={r.name: m.stationary(r) for r in fleet.rules},
                base=dict(m.base),
            )
            for m in fleet.models
        }
        return cls(mu=fleet.mu, models=models, rules=tuple(r.name for r in fleet.rules))

    def delta(self, prefix: str, model: str) -> float:
        """Planted Δ(prefix→model) = μ + π_prefix + σ_model (0 on the diagonal)."""
        if prefix == model:
            return 0.0
        return self.mu + self.models[prefix].influence + self.models[model].susceptibility

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the demo writes it next to the refit)."""
        return {
            "mu": self.mu,
            "rules": list(self.rules),
            "models": {
                name: {
                    "prefix_influence": m.influence,
                    "suffix_susceptibility": m.susceptibility,
                    "p_tf": dict(m.p_tf),
                    "p_ft": dict(m.p_ft),
                    "stationary": dict(m.stationary),
                    "base": dict(m.base),
                }
                for name, m in self.models.items()
            },
        }


def expected_delta(
    fleet: Fleet, prefix: str, model: str, rule: str, depth_weights: Mapping[int, float]
) -> float:
    """Clipping-aware Δ(prefix→model) for one rule, averaged over a handoff depth mix.

    Args:
        fleet: the planted world.
        prefix: A.
        model: B.
        rule: rule name.
        depth_weights: depth → weight of the handoff cell's turns at that depth.
    """
    m = fleet.model(model)
    curve = m.curve(next(r for r in fleet.rules if r.name == rule), fleet.max_depth)
    shift = fleet.handoff_shift(prefix, model)
    total = sum(depth_weights.values())
    out = 0.0
    for depth, w in depth_weights.items():
        a = float(curve[min(depth, len(curve)) - 1])
        out += w * (float(np.clip(a + shift, CLIP_LOW, CLIP_HIGH)) - a)
    return out / total if total else 0.0


def pearson(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Pearson correlation (NaN when either side is constant or shorter than 3)."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(a) < 3 or a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])
