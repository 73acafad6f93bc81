"""False-alert and power of the shipped alert expressions on wide, production-like fleets.

``sim.calibration`` scores ``significant`` (Benjamini–Hochberg) on the six-model calibration
population. The pages do not read ``significant``: they threshold the exported intervals
(``deploy/prometheus/handoffmon-rules.yml``). This module evaluates those expressions on the
refit's result, per refit, on fleets of K = 10–30 models with skewed routing, models seen in
under 1% of turns, per-conversation difficulty and persistent (AR(1)) turn noise:

- ``HandoffPairRisky`` ``delta_upper``: an observed pair's Δ upper bound < −0.05 from ≥ 100
  checked turns, and Δ significant after Benjamini–Hochberg over the fit's pairs (the
  ``handoffmon_handoff_significant`` gauge: without it, pages per refit grow with pairs × fits);
- ``HandoffPairRisky`` ``risk``: risk + 1.96·SE < −0.15, unless the pair is observed and its Δ
  lower bound is above −0.15;
- ``HandoffsIntoModelHurt``: Δ into B's upper bound < −0.05, and Δ into B significant after
  Benjamini–Hochberg over the fit's models (``handoffmon_handoff_into_significant``).

Each is held for a fit flagged ``verdict_routing`` (as the rules hold it). The hourly-traffic
gates (≥ 20 handoff turns an hour) depend on the window, not on the counts, and are left out:
the rates here are the expressions' worst case.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from handoffmon.config import RefitConfig
from handoffmon.depth import DepthBuckets
from handoffmon.sim.population import PopModel, Population, expected_delta, simulate

if TYPE_CHECKING:
    from handoffmon.refit.result import RuleFit

PAIR_DELTA_UPPER = -0.05
"""HandoffPairRisky (delta_upper): Δ's interval wholly below this…"""
PAIR_MIN_CHECKS = 100
"""…from at least this many checked turns of the pair."""
RISK_UPPER = -0.15
"""HandoffPairRisky (risk): risk + 1.96·SE below this (and an observed Δ's lower bound not above it)."""
INTO_UPPER = -0.05
"""HandoffsIntoModelHurt: Δ into B's interval wholly below this."""


def wide_population(
    k: int,
    *,
    sparse: int = 2,
    seed: int = 0,
    harmful: tuple[tuple[int, int], ...] = (),
    harm: float = -0.15,
    confounding: float = 0.0,
    turn_rho: float = 0.8,
    conversation_sd: float = 0.08,
    rules: int = 1,
) -> Population:
    """A fleet of ``k`` models: bases 0.82–0.97, decays 0–0.004 a turn, Zipf-like routing
    (the first model takes several times the share of the tenth), the last ``sparse`` models
    routed to 150× less often than the first (each under 1% of turns), 6% ping-pong
    conversations, conversation SD ``conversation_sd``, AR(1) turn noise with ``turn_rho``.
    ``harmful`` (prefix, model) index pairs get ``harm``; every other pair 0. ``rules`` rules,
    their bases 2 pp apart (their checks of a turn share its noise). The fleet's
    parameters are drawn from ``seed`` (the traffic from ``simulate``'s own seed)."""
    rng = np.random.default_rng([20261207, k, seed])
    models = []
    for i in range(k):
        weight = 1.0 / (1 + i) ** 0.8
        if i >= k - sparse:
            weight = 1.0 / 150
        models.append(
            PopModel(
                f"m{i:02d}",
                base=float(rng.uniform(0.82, 0.97)),
                decay=float(rng.uniform(0.0, 0.004)),
                start=weight,
                route=weight,
            )
        )
    effects = np.zeros((k, k))
    for a, b in harmful:
        effects[a, b] = harm
    return Population(
        models=tuple(models),
        rules=tuple(f"rule_{i}" for i in range(rules)),
        rule_offsets=tuple(0.02 * (i - (rules - 1) / 2) for i in range(rules)),
        effects=effects,
        conversation_sd=conversation_sd,
        turn_rho=turn_rho,
        pingpong_share=0.06,
        confounding=confounding,
    )


@dataclass
class AlertTally:
    """What the alert expressions did over the replicates (the fits scored, summed).

    ``*_null`` count opportunities and firings on pairs / models whose planted effect is 0
    (for Δ into B: a model none of whose prefixes is planted harmful); ``*_harm`` on planted
    harmful pairs. ``refits_firing`` counts refits where any expression fired on a null pair or
    model; ``covered``/``reported`` score the Δ intervals against the estimand; ``into_*``
    score Δ into B's intervals against 0 on null models. ``pair_null_expected`` sums, over the
    no-effect pairs the Δ branch can page (≥ 100 checks, not held), the chance it pages if Δ̂
    were normal about 0 with the reported SE (Φ(−0.05/SE − q), q the interval's upper
    half-width over SE): pages well above it mean a tail thinner than the interval claims;
    ``pair_null_interval_fired`` counts the pages of the interval alone (without the
    ``significant`` gate), which that prediction is about, and ``refits_firing_ungated`` the
    refits that would page without the gate (``pair_harm_interval_fired``: the harmful pairs it
    would page). ``refits_firing_into`` counts refits where
    HandoffsIntoModelHurt fired on a null model, ``refits_firing_into_ungated`` where its interval
    alone would have (``into_null_interval_fired``: the null models it would page);
    ``into_harm_fired`` / ``into_harm_interval_fired``: models with a harmful pair into them
    it pages with and without the gate (``into_power``, diluted over B's other prefixes).
    """

    replicates: int = 0
    pair_null: int = 0
    pair_null_fired: int = 0
    pair_null_expected: float = 0.0
    pair_null_interval_fired: int = 0
    risk_null: int = 0
    risk_null_fired: int = 0
    into_null: int = 0
    into_null_fired: int = 0
    into_null_interval_fired: int = 0
    into_harm: int = 0
    into_harm_fired: int = 0
    into_harm_interval_fired: int = 0
    into_null_covered: int = 0
    pair_harm: int = 0
    pair_harm_fired: int = 0
    pair_harm_interval_fired: int = 0
    refits_firing: int = 0
    refits_firing_ungated: int = 0
    refits_firing_into: int = 0
    refits_firing_into_ungated: int = 0
    covered: int = 0
    reported: int = 0
    sparse_share: list[float] = field(default_factory=list)

    def rate(self, fired: int, total: int) -> float:
        """fired / total (0 when there was no opportunity)."""
        return fired / total if total else 0.0

    def summary(self) -> dict[str, float | int]:
        """The rates, rounded, for a report."""
        return {
            "replicates": self.replicates,
            "pair_null": self.pair_null,
            "pair_false_rate": round(self.rate(self.pair_null_fired, self.pair_null), 5),
            "pair_pages": self.pair_null_fired,
            "pair_pages_interval": self.pair_null_interval_fired,
            "pair_pages_expected": round(self.pair_null_expected, 2),
            "risk_null": self.risk_null,
            "risk_false_rate": round(self.rate(self.risk_null_fired, self.risk_null), 5),
            "into_null": self.into_null,
            "into_false_rate": round(self.rate(self.into_null_fired, self.into_null), 5),
            "into_false_rate_interval": round(self.rate(self.into_null_interval_fired, self.into_null), 5),
            "into_coverage_of_0": round(self.rate(self.into_null_covered, self.into_null), 4),
            "refits_firing": round(self.rate(self.refits_firing, self.replicates), 4),
            "refits_firing_ungated": round(self.rate(self.refits_firing_ungated, self.replicates), 4),
            "refits_firing_into": round(self.rate(self.refits_firing_into, self.replicates), 4),
            "refits_firing_into_ungated": round(
                self.rate(self.refits_firing_into_ungated, self.replicates), 4
            ),
            "power": round(self.rate(self.pair_harm_fired, self.pair_harm), 4),
            "power_ungated": round(self.rate(self.pair_harm_interval_fired, self.pair_harm), 4),
            "into_power": round(self.rate(self.into_harm_fired, self.into_harm), 4),
            "into_power_ungated": round(self.rate(self.into_harm_interval_fired, self.into_harm), 4),
            "coverage": round(self.rate(self.covered, self.reported), 4),
            "max_sparse_share": round(max(self.sparse_share, default=0.0), 5),
        }


def alert_calibration(
    pop: Population,
    *,
    replicates: int,
    conversations: int,
    seed: int = 0,
    sparse: int = 0,
    settings: RefitConfig | None = None,
    every_fit: bool = False,
) -> AlertTally:
    """Refit ``replicates`` simulated windows of ``pop`` (replicate i: ``simulate`` seed
    ``[seed, i]``) and evaluate the alert expressions on each (first rule's fit).

    ``sparse``: the last ``sparse`` models' share of turns is recorded (``sparse_share``).
    ``every_fit``: every rule's fit and the pooled ``all`` are scored, as the alerts read them
    all (a page from any of them counts once in ``refits_firing``).
    """
    from handoffmon.refit import refit
    from handoffmon.sim.counting import counts_from_rows_fast as counts_from_rows

    settings = settings or RefitConfig()
    buckets = DepthBuckets()
    names = pop.names
    harmful_into = {names[b] for b in range(len(names)) if np.any(pop.effects[:, b] != 0)}
    scored: list[tuple[str, int | None]] = [(pop.rules[0], 0)]
    if every_fit:
        scored = [(r, i) for i, r in enumerate(pop.rules)] + [("all", None)]
    t = AlertTally()
    for i in range(replicates):
        rows = simulate(pop, conversations, seed=np.random.default_rng([seed, i]))
        if sparse:
            share = np.bincount(rows.model, minlength=len(names))[-sparse:] / max(len(rows), 1)
            t.sparse_share.append(float(share.max()))
        result = refit(counts_from_rows(rows, buckets), buckets=buckets, settings=settings, now=0.0)
        any_routing = any(f.verdict_routing for f in result.rules.values())
        t.replicates += 1
        fired = np.zeros(4, dtype=bool)
        for rule, index in scored:
            fit = result.rules[rule]
            # the rules hold a flagged rule, and the pooled fit while any rule is flagged
            held = fit.verdict_routing or (index is None and any_routing)
            fired |= _score_fit(t, fit, pop, expected_delta(rows, rule=index), harmful_into, held)
        t.refits_firing += int(fired[0])
        t.refits_firing_ungated += int(fired[1])
        t.refits_firing_into += int(fired[2])
        t.refits_firing_into_ungated += int(fired[3])
    return t


def _score_fit(
    t: AlertTally, fit: RuleFit, pop: Population, truth: np.ndarray, harmful_into: set[str], held: bool
) -> np.ndarray:
    """Add one fit's pairs and models to ``t``; whether, with no effect, any expression fired,
    any would have fired without the ``significant`` gates, the into-B one fired, and the into-B
    one would have fired without its gate."""
    from scipy.special import ndtr

    names = pop.names
    fired = np.zeros(4, dtype=bool)
    for p in fit.pairs:
        a, b = names.index(p.prefix_model), names.index(p.model)
        null = pop.effects[a, b] == 0
        interval_fires = p.observed and p.n >= PAIR_MIN_CHECKS and p.ci_high < PAIR_DELTA_UPPER and not held
        pair_fires = interval_fires and p.significant
        risk_fires = (
            math.isfinite(p.risk_se)
            and p.risk + 1.96 * p.risk_se < RISK_UPPER
            and not (p.observed and p.ci_low > RISK_UPPER)
            and not held
        )
        if p.observed:
            t.reported += 1
            t.covered += int(p.ci_low <= truth[a, b] <= p.ci_high)
        if null:
            if p.observed:
                t.pair_null += 1
                t.pair_null_fired += int(pair_fires)
                t.pair_null_interval_fired += int(interval_fires)
                if p.n >= PAIR_MIN_CHECKS and p.se > 0 and not held:
                    q = (p.ci_high - p.delta) / p.se
                    t.pair_null_expected += float(ndtr(PAIR_DELTA_UPPER / p.se - q))
            if math.isfinite(p.risk_se):
                t.risk_null += 1
                t.risk_null_fired += int(risk_fires)
            fired |= (pair_fires or risk_fires, interval_fires or risk_fires, False, False)
        elif p.observed:
            t.pair_harm += 1
            t.pair_harm_fired += int(pair_fires or risk_fires)
            t.pair_harm_interval_fired += int(interval_fires or risk_fires)
    for name, scores in fit.models.items():
        if not math.isfinite(scores.into_ci_high):
            continue
        into_interval_fires = scores.into_ci_high < INTO_UPPER and not held
        into_fires = into_interval_fires and scores.into_significant
        if name in harmful_into:
            t.into_harm += 1
            t.into_harm_fired += int(into_fires)
            t.into_harm_interval_fired += int(into_interval_fires)
            continue
        t.into_null += 1
        t.into_null_fired += int(into_fires)
        t.into_null_interval_fired += int(into_interval_fires)
        t.into_null_covered += int(scores.into_ci_low <= 0.0 <= scores.into_ci_high)
        fired |= (into_fires, into_interval_fires, into_fires, into_interval_fires)
    return fired
