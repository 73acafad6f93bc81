"""The pair-risk table a refit publishes for routing: (prefix model, candidate) → risk, SE, shadow cost."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from handoffmon.errors import InputError
from handoffmon.refit.result import ALL_RULES, RefitResult

NAN = float("nan")


@dataclass(frozen=True, slots=True)
class ShadowCost:
    """The table's slot for a pair's shadow switch cost: the policy's view of a refit ``SwitchCost``.

    Reduced from ``handoffmon.refit.result.SwitchCost`` (the refit's full record, with
    interval, p-values and the observational comparison) to what a decision weighs, with
    the interval turned into a standard error. Same key as the table: (prefix model A,
    candidate B). ``estimate`` is adherence of B continuing A's history minus A
    continuing it (paired, same prefix), in proportion units like ``PairEffect.delta``.

    Attributes:
        estimate: the paired difference.
        se: its standard error.
        n_pairs: paired shadow turns behind it.
        significant: the shadow statistics flagged it (their own FDR control).
    """

    estimate: float
    se: float
    n_pairs: int
    significant: bool = False


@dataclass(frozen=True, slots=True)
class PairRisk:
    """What the table knows about handing a conversation last written by A to candidate B.

    Attributes:
        risk: fitted handoff risk μ + π_A + σ_B (proportion units; negative hurts).
        risk_se: its standard error.
        n: checked handoff turns observed in the cell A→B (0 = predicted from the decomposition).
        delta: observed depth-adjusted Δ(A→B) (NaN when not observed).
        ci_low: lower bound of Δ's interval.
        ci_high: upper bound.
        significant: Δ is significant under the refit's Benjamini–Hochberg control.
        shadow: the shadow switch cost, when measured.
    """

    risk: float
    risk_se: float
    n: int = 0
    delta: float = NAN
    ci_low: float = NAN
    ci_high: float = NAN
    significant: bool = False
    shadow: ShadowCost | None = None


SAME_AUTHOR = PairRisk(0.0, 0.0)
"""A→A: no handoff, so no handoff risk (and no switch cost) by definition."""


class PairRiskTable:
    """Immutable lookup of every ordered pair's risk from one refit (built off the request path).

    ``score`` is the policy's hot call: one dict lookup returning ``(value, se, kind)``
    where ``kind`` is ``"shadow"`` for a measured switch cost and ``"risk"`` for the
    observational fitted risk (they estimate different contrasts, so the policy only
    compares values of one kind).

    Args:
        pairs: (prefix model, candidate model) → ``PairRisk``.
        created_at: UNIX time of the refit behind it (staleness is judged from it).
        rule: the fit the risks come from (``all`` = pooled over rules).
        source: where the refit's counts came from.
    """

    __slots__ = ("_scores", "created_at", "pairs", "rule", "source")

    def __init__(
        self,
        pairs: Mapping[tuple[str, str], PairRisk],
        *,
        created_at: float,
        rule: str = ALL_RULES,
        source: str = "",
    ) -> None:
        self.pairs: Mapping[tuple[str, str], PairRisk] = dict(pairs)
        self.created_at = float(created_at)
        self.rule = rule
        self.source = source
        self._scores: dict[tuple[str, str], tuple[float, float, str]] = {
            k: _score(v) for k, v in self.pairs.items() if _usable(v)
        }

    def score(self, prefix_model: str, model: str) -> tuple[float, float, str] | None:
        """(value, se, kind) of handing ``prefix_model``'s conversation to ``model``; None if unknown."""
        if prefix_model == model:
            return _SAME
        return self._scores.get((prefix_model, model))

    def get(self, prefix_model: str, model: str) -> PairRisk | None:
        """The full record of a pair (``SAME_AUTHOR`` for A→A)."""
        if prefix_model == model:
            return SAME_AUTHOR
        return self.pairs.get((prefix_model, model))

    def age_s(self, now: float) -> float:
        """Seconds since the refit behind the table."""
        return now - self.created_at

    def __len__(self) -> int:
        return len(self.pairs)

    @classmethod
    def from_refit(
        cls,
        result: RefitResult,
        *,
        rule: str = ALL_RULES,
        switch_costs: Mapping[tuple[str, str], ShadowCost] | None = None,
    ) -> PairRiskTable:
        """The table of one fit of ``result`` (pooled ``all`` by default).

        Shadow switch costs come from ``switch_costs`` when given, else from the fit's
        ``switch_costs`` entries when the refit carries them (issue 22's documents).

        Raises:
            InputError: ``rule`` is not in the result.
        """
        fit = result.rules.get(rule)
        if fit is None:
            raise InputError(
                f"routing.rule {rule!r}: the refit has no fit for it (has {sorted(result.rules)})"
            )
        shadow = (
            dict(switch_costs)
            if switch_costs is not None
            else shadow_costs(getattr(fit, "switch_costs", ()), confidence=result.confidence)
        )
        pairs = {
            (p.prefix_model, p.model): PairRisk(
                p.risk,
                p.risk_se,
                p.n,
                p.delta,
                p.ci_low,
                p.ci_high,
                p.significant,
                shadow.get((p.prefix_model, p.model)),
            )
            for p in fit.pairs
        }
        for key, cost in shadow.items():  # measured before the refit knew the pair
            if key not in pairs:
                pairs[key] = PairRisk(NAN, NAN, shadow=cost)
        return cls(pairs, created_at=result.created_at, rule=rule, source=result.source)


def shadow_costs(entries: Iterable[Any], *, confidence: float = 0.95) -> dict[tuple[str, str], ShadowCost]:
    """``ShadowCost`` by pair from the refit's ``switch_costs`` entries (objects or dicts with
    ``prefix_model``, ``model``, ``n_pairs``, ``estimate``, ``ci_low``, ``ci_high``, ``significant``);
    the SE is the interval's half-width over the normal quantile."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    out: dict[tuple[str, str], ShadowCost] = {}
    for e in entries:
        get = e.get if isinstance(e, Mapping) else lambda k, e=e: getattr(e, k, None)
        lo, hi, est = get("ci_low"), get("ci_high"), get("estimate")
        if est is None or lo is None or hi is None:
            continue
        se = (float(hi) - float(lo)) / (2 * z)
        out[(str(get("prefix_model")), str(get("model")))] = ShadowCost(
            float(est), se, int(get("n_pairs") or 0), bool(get("significant"))
        )
    return out


_SAME = (0.0, 0.0, "same")


def _usable(p: PairRisk) -> bool:
    if p.shadow is not None and p.shadow.n_pairs > 0 and math.isfinite(p.shadow.se):
        return True
    return math.isfinite(p.risk) and math.isfinite(p.risk_se)


def _score(p: PairRisk) -> tuple[float, float, str]:
    s = p.shadow
    if s is not None and s.n_pairs > 0 and math.isfinite(s.estimate) and math.isfinite(s.se):
        return s.estimate, s.se, "shadow"
    return p.risk, p.risk_se, "risk"
