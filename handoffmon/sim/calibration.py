"""Monte Carlo calibration of the refit's alert signals on a production-like population.

``standard_population`` is the world the promises in ``docs/concepts/alert-promises.md``
are measured on: six models (two at ~97% adherence), a canary seen in ~20 turns, a
suffix-only escalation model, 8% ping-pong conversations, handoffs bunched at depth-bucket
ends, per-conversation difficulty, persistent turn noise and depth decay. ``calibrate``
refits many independent replicates and counts what an operator would see.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from handoffmon.config import RefitConfig
from handoffmon.counts import Counts
from handoffmon.depth import DepthBuckets
from handoffmon.sim.population import PopModel, Population, TurnRows, expected_delta, simulate

PLANTED_HARM = -0.15
"""Planted effect of the harmful pairs (probability units, i.e. −15 pp)."""


def standard_population(*, harmful: tuple[tuple[str, str], ...] = (), rules: int = 1) -> Population:
    """The calibration world; ``harmful`` pairs get ``PLANTED_HARM``, every other pair 0."""
    models = (
        PopModel("atlas", base=0.97, decay=0.0015, start=3.0, route=2.0),
        PopModel("birch", base=0.90, decay=0.003, start=2.0, route=2.0),
        PopModel("cedar", base=0.95, decay=0.002, start=2.0, route=1.5),
        PopModel("dune", base=0.85, decay=0.004, start=1.0, route=1.0),
        PopModel("ember", base=0.92, decay=0.002, start=1.0, route=1.0),
        PopModel("canary", base=0.90),
        PopModel("escalate", base=0.88, start=0.0, route=0.6, suffix_only=True),
    )
    names = tuple(m.name for m in models)
    effects = np.zeros((len(models), len(models)))
    for a, b in harmful:
        effects[names.index(a), names.index(b)] = PLANTED_HARM
    offsets = tuple(0.02 * (i - (rules - 1) / 2) for i in range(rules))
    return Population(
        models=models,
        rules=tuple(f"rule_{i}" for i in range(rules)),
        rule_offsets=offsets,
        effects=effects,
        canary="canary",
        pingpong_share=0.08,
    )


@dataclass(frozen=True)
class Calibration:
    """What ``calibrate`` measured over its replicates.

    Attributes:
        replicates: refits run.
        null_pairs: reported pairs whose planted effect is 0, summed over replicates.
        false_significant: of those, flagged ``significant``.
        refits_with_false: replicates with at least one falsely significant pair.
        harmful_pairs: reported planted-harmful pairs, summed over replicates.
        harmful_found: of those, significant with Δ < 0.
        covered: reported pairs whose interval held the estimand.
        reported: reported pairs (the coverage denominator).
    """

    replicates: int
    null_pairs: int
    false_significant: int
    refits_with_false: int
    harmful_pairs: int
    harmful_found: int
    covered: int
    reported: int

    @property
    def false_rate(self) -> float:
        """Per-pair false ``significant`` rate under a zero planted effect."""
        return self.false_significant / max(self.null_pairs, 1)

    @property
    def familywise(self) -> float:
        """Share of refits with ≥ 1 false pair."""
        return self.refits_with_false / max(self.replicates, 1)

    @property
    def power(self) -> float:
        """Share of planted −15 pp pairs found (significant and negative)."""
        return self.harmful_found / max(self.harmful_pairs, 1)

    @property
    def coverage(self) -> float:
        """Share of Δ intervals holding the estimand."""
        return self.covered / max(self.reported, 1)


def calibrate(
    pop: Population,
    *,
    replicates: int,
    conversations: int = 3000,
    seed: int = 0,
    settings: RefitConfig | None = None,
    rule: str | None = None,
    count: Callable[[TurnRows], Counts] | None = None,
) -> Calibration:
    """Refit ``replicates`` independent simulated windows and score the pair signals.

    Args:
        pop: the planted world.
        replicates: independent runs.
        conversations: conversations per run.
        seed: base seed (replicate i uses ``[seed, i]``).
        settings: refit settings (default ``RefitConfig()``).
        rule: which fit to score; default the first rule (``"all"`` = the pooled fit).
        count: rows → the refit's counts; default the turn-level aggregation
            (``sim.counting.counts_from_rows``); ``sim.live`` replays them through a Monitor.
    """
    from handoffmon.refit import refit
    from handoffmon.sim.counting import counts_from_rows

    settings = settings or RefitConfig()
    buckets = DepthBuckets()
    rule = rule or pop.rules[0]
    names = pop.names
    tally = np.zeros(8, dtype=np.int64)
    for i in range(replicates):
        rows = simulate(pop, conversations, seed=np.random.default_rng([seed, i]))
        truth = expected_delta(rows, rule=None if rule == "all" else pop.rules.index(rule))
        counts = count(rows) if count is not None else counts_from_rows(rows, buckets)
        result = refit(counts, buckets=buckets, settings=settings, now=0.0)
        false_here = 0
        for p in result.rules[rule].pairs:
            if not p.observed:
                continue
            a, b = names.index(p.prefix_model), names.index(p.model)
            planted = pop.effects[a, b]
            tally[6] += 1
            tally[5] += int(p.ci_low <= truth[a, b] <= p.ci_high)
            if planted == 0:
                tally[0] += 1
                tally[1] += int(p.significant)
                false_here += int(p.significant)
            else:
                tally[3] += 1
                tally[4] += int(p.significant and p.delta < 0)
        tally[2] += int(false_here > 0)
    return Calibration(
        replicates=replicates,
        null_pairs=int(tally[0]),
        false_significant=int(tally[1]),
        refits_with_false=int(tally[2]),
        harmful_pairs=int(tally[3]),
        harmful_found=int(tally[4]),
        covered=int(tally[5]),
        reported=int(tally[6]),
    )
