"""Planted truth vs a refit: correlations of π, σ and Δ, stationary-adherence coverage."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from handoffmon.refit.result import ALL_RULES, RefitResult
from handoffmon.sim.truth import Truth, pearson


@dataclass(frozen=True)
class StationaryCheck:
    """Planted vs estimated stationary adherence of one (model, rule) same-author chain."""

    model: str
    rule: str
    planted: float
    estimate: float
    ci_low: float
    ci_high: float

    @property
    def covered(self) -> bool:
        """The planted value lies inside the refit's interval."""
        return self.ci_low <= self.planted <= self.ci_high


@dataclass(frozen=True)
class Recovery:
    """How well a refit recovered the planted world.

    Attributes:
        models: models present in both the truth and the refit, in truth order.
        planted_pi: planted π per model (same order).
        estimated_pi: refit π.
        planted_sigma: planted σ.
        estimated_sigma: refit σ.
        pearson_pi: correlation of planted and estimated π.
        pearson_sigma: correlation of planted and estimated σ.
        pearson_delta: correlation of planted μ + π_A + σ_B with the observed Δ(A→B).
        stationary: per (model, rule) checks from ``markov_same_author``.
    """

    models: tuple[str, ...]
    planted_pi: tuple[float, ...]
    estimated_pi: tuple[float, ...]
    planted_sigma: tuple[float, ...]
    estimated_sigma: tuple[float, ...]
    pearson_pi: float
    pearson_sigma: float
    pearson_delta: float
    stationary: tuple[StationaryCheck, ...]

    @property
    def stationary_coverage(self) -> float:
        """Share of (model, rule) chains whose planted stationary adherence is inside the interval."""
        if not self.stationary:
            return float("nan")
        return sum(c.covered for c in self.stationary) / len(self.stationary)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {
            "pearson_pi": self.pearson_pi,
            "pearson_sigma": self.pearson_sigma,
            "pearson_delta": self.pearson_delta,
            "stationary_coverage": self.stationary_coverage,
            "models": {
                m: {"planted_pi": p, "estimated_pi": e, "planted_sigma": ps, "estimated_sigma": es}
                for m, p, e, ps, es in zip(
                    self.models,
                    self.planted_pi,
                    self.estimated_pi,
                    self.planted_sigma,
                    self.estimated_sigma,
                    strict=True,
                )
            },
        }


def _stationary_checks(result: RefitResult, truth: Truth) -> tuple[StationaryCheck, ...]:
    out: list[StationaryCheck] = []
    for rule in truth.rules:
        fit = result.rules.get(rule)
        if fit is None:
            continue
        for model, planted in truth.models.items():
            mf = fit.markov_same_author.get(model)
            if mf is None or math.isnan(mf.stationary):
                continue
            lo, hi = mf.stationary_ci
            out.append(StationaryCheck(model, rule, planted.stationary[rule], mf.stationary, lo, hi))
    return tuple(out)


def recover(result: RefitResult, truth: Truth, *, rule: str = ALL_RULES) -> Recovery:
    """Compare a refit with the planted truth.

    Args:
        result: the refit.
        truth: what was planted.
        rule: which fit to read π, σ and Δ from (default: pooled over rules).
    """
    fit = result.rules[rule]
    models = tuple(m for m in truth.models if m in fit.models)
    pi_p = tuple(truth.models[m].influence for m in models)
    pi_e = tuple(fit.models[m].prefix_influence for m in models)
    sg_p = tuple(truth.models[m].susceptibility for m in models)
    sg_e = tuple(fit.models[m].suffix_susceptibility for m in models)
    pairs = [
        p for p in fit.pairs if p.observed and p.prefix_model in truth.models and p.model in truth.models
    ]
    return Recovery(
        models=models,
        planted_pi=pi_p,
        estimated_pi=pi_e,
        planted_sigma=sg_p,
        estimated_sigma=sg_e,
        pearson_pi=pearson(pi_p, pi_e),
        pearson_sigma=pearson(sg_p, sg_e),
        pearson_delta=pearson(
            [truth.delta(p.prefix_model, p.model) for p in pairs], [p.delta for p in pairs]
        ),
        stationary=_stationary_checks(result, truth),
    )
