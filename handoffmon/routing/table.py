"""The pair-risk table a refit publishes for routing: (prefix model, candidate) → risk, SE, shadow cost."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from handoffmon.errors import InputError
from handoffmon.refit.result import ALL_RULES, RefitResult, RuleFit

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
        adherence: observed adherence of B's replies right after A's (the handoff cell's pass
            share), standardized to the depth mix of all of A's handoffs (``handoff_adherence``);
            NaN when the cell is too small or covers too little of that mix.
        adherence_se: its conversation-clustered standard error.
    """

    risk: float
    risk_se: float
    n: int = 0
    delta: float = NAN
    ci_low: float = NAN
    ci_high: float = NAN
    significant: bool = False
    shadow: ShadowCost | None = None
    adherence: float = NAN
    adherence_se: float = NAN


SAME_AUTHOR = PairRisk(0.0, 0.0)
"""A→A: no handoff, so no handoff risk (and no switch cost) by definition."""


class PairRiskTable:
    """Immutable lookup of every ordered pair's risk from one refit (built off the request path).

    ``compare`` is the policy's hot call: two dict lookups and the difference of one kind of
    score both candidates have — ``shadow`` (a measured, paired switch cost) whenever both
    have one; else whichever of ``adherence`` (the observed adherence of the candidate's
    replies right after the prefix model's, depth-standardized) and ``risk`` (the
    decomposition's fitted μ + π_A + σ_B, defined for pairs never observed) has the smaller
    standard error of the difference — chosen from the SEs, before looking at the
    estimates. The risk pools every prefix and is the sharper one where baselines are
    plentiful; the observed adherence needs no baseline, and is the sharper one where clean
    baselines are thin (σ rests on them). Values of different kinds are never compared;
    same-author continuation is 0 ± 0 as a switch cost and as a risk. ``score`` gives a
    pair's shadow or risk score.

    Args:
        pairs: (prefix model, candidate model) → ``PairRisk``.
        created_at: UNIX time of the refit behind it (staleness is judged from it).
        rule: the fit the risks come from (``all`` = pooled over rules).
        source: where the refit's counts came from.
    """

    __slots__ = ("_kinds", "_scores", "created_at", "pairs", "rule", "source")

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
        self._kinds: dict[tuple[str, str], dict[str, tuple[float, float]]] = {
            k: kinds for k, v in self.pairs.items() if (kinds := _kinds(v))
        }

    def compare(self, prefix_model: str, c: str, b: str) -> tuple[float, float, str] | None:
        """(score of ``c`` − score of ``b``, its SE, kind) for a conversation last written by
        ``prefix_model``, in the best kind both have (see the class); None if none is shared.

        The SE is √(se_c² + se_b²): for ``risk`` it is conservative (the shared μ + π_A
        terms cancel in the difference but their variance is counted twice); for
        ``adherence`` the two cells hold different turns.
        """
        diffs = self.differences(prefix_model, c, b)
        return min(diffs, key=lambda d: d[1]) if diffs else None  # adherence first on a tie

    def differences(self, prefix_model: str, c: str, b: str) -> list[tuple[float, float, str]]:
        """Every (score of ``c`` − score of ``b``, its SE, kind) both have: the shadow switch cost
        alone when both have one (it is preferred outright), else the observed adherence and the
        fitted risk that both have, in that order. ``compare`` is the one with the smallest SE."""
        kc = _SAME_KINDS if c == prefix_model else self._kinds.get((prefix_model, c))
        kb = _SAME_KINDS if b == prefix_model else self._kinds.get((prefix_model, b))
        if kc is None or kb is None:
            return []
        sc, sb = kc.get("shadow"), kb.get("shadow")
        if sc is not None and sb is not None:
            return [(sc[0] - sb[0], math.sqrt(sc[1] * sc[1] + sb[1] * sb[1]), "shadow")]
        out: list[tuple[float, float, str]] = []
        for kind in ("adherence", "risk"):
            sc, sb = kc.get(kind), kb.get(kind)
            if sc is not None and sb is not None:
                out.append((sc[0] - sb[0], math.sqrt(sc[1] * sc[1] + sb[1] * sb[1]), kind))
        return out

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
        observed = handoff_adherence(fit, min_n=result.min_n)
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
                *observed.get((p.prefix_model, p.model), (NAN, NAN)),
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


MIN_DEPTH_COVERAGE = 0.8
"""A handoff cell gets an ``adherence`` score only where its depth buckets hold at least this
share of its prefix model's handoffs: standardizing it to that mix must not rest on buckets
it never saw."""


def handoff_adherence(
    fit: RuleFit, *, min_n: int, min_coverage: float = MIN_DEPTH_COVERAGE
) -> dict[tuple[str, str], tuple[float, float]]:
    """(A, B) → (adherence, SE) of B's replies right after A's, depth-standardized.

    From the fit's cells (pooled ``all`` fit: every rule's checks): for each handoff cell
    A→B with at least ``min_n`` checks, the pass shares per depth bucket weighted by the
    depth mix of *all* of A's handoff cells (so two candidates for A's conversations are
    compared at the same depths, whichever depths each was handed conversations at),
    over the buckets the cell has data in — required to hold ``min_coverage`` of that
    mix. Variance Σ w_d² p̃(1 − p̃)/n_d (p̃ = (x + ½)/(n + 1)) times the cell's
    conversation-clustered design effect from the refit. Fits without cells (per-rule
    fits) give nothing.
    """
    deff = {(p.prefix_model, p.model): p.design_effect for p in fit.pairs}
    cells = [c for c in fit.cells if c.prefix_model != c.model and (c.prefix_model, c.model) in deff]
    mix: dict[str, np.ndarray] = {}
    for c in cells:
        n = np.asarray(c.n, dtype=float)
        mix[c.prefix_model] = mix[c.prefix_model] + n if c.prefix_model in mix else n
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for c in cells:
        n = np.asarray(c.n, dtype=float)
        ref = mix[c.prefix_model]
        have = n > 0
        if n.sum() < min_n or ref.sum() <= 0 or ref[have].sum() < min_coverage * ref.sum():
            continue
        w = np.where(have, ref, 0.0) / ref[have].sum()
        p = np.where(have, np.nan_to_num(np.asarray(c.adherence, dtype=float)), 0.0)
        safe = np.where(have, n, 1.0)
        pt = (p * n + 0.5) / (n + 1.0)
        var = float(np.sum(np.where(have, w * w * pt * (1 - pt) / safe, 0.0)))
        d = deff[(c.prefix_model, c.model)]
        var *= d if math.isfinite(d) and d > 1.0 else 1.0
        out[(c.prefix_model, c.model)] = (float(np.sum(w * p)), math.sqrt(var))
    return out


KINDS = ("shadow", "adherence", "risk")
"""Score kinds ``PairRiskTable.compare`` may use (shadow first; then the sharper of the others)."""

_SAME = (0.0, 0.0, "same")
_SAME_KINDS: dict[str, tuple[float, float]] = {"shadow": (0.0, 0.0), "risk": (0.0, 0.0)}


def _kinds(p: PairRisk) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    s = p.shadow
    if s is not None and s.n_pairs > 0 and math.isfinite(s.estimate) and math.isfinite(s.se):
        out["shadow"] = (s.estimate, s.se)
    if math.isfinite(p.adherence) and math.isfinite(p.adherence_se):
        out["adherence"] = (p.adherence, p.adherence_se)
    if math.isfinite(p.risk) and math.isfinite(p.risk_se):
        out["risk"] = (p.risk, p.risk_se)
    return out


def _usable(p: PairRisk) -> bool:
    if p.shadow is not None and p.shadow.n_pairs > 0 and math.isfinite(p.shadow.se):
        return True
    return math.isfinite(p.risk) and math.isfinite(p.risk_se)


def _score(p: PairRisk) -> tuple[float, float, str]:
    s = p.shadow
    if s is not None and s.n_pairs > 0 and math.isfinite(s.estimate) and math.isfinite(s.se):
        return s.estimate, s.se, "shadow"
    return p.risk, p.risk_se, "risk"
