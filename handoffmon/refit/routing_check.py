"""Does the router hand off after failed checks? A warning the counters can give.

Δ is observational: when routing depends on the conversation's own verdicts (a fallback or
escalation that fires after a failed reply), the handed-off turns follow bad moments of
hard conversations and the clean baseline keeps the conversations that never failed, so Δ
comes out negative for pairs with no effect at all (known limit, see
docs/concepts/alert-promises.md). The transition counters already hold what it takes to
see this routing: over consecutive checks of a rule in one conversation,

    ratio = P(next turn is a handoff | this check failed) / P(next turn is a handoff | it passed),

pooled over models (keyed by the later turn's model; ``unknown`` handoff states left out).
With routing blind to verdicts the ratio is near 1 (0.94–0.96 on the calibration
population, whose failure rates and handoffs both vary with depth). Its interval is on the
log scale, counts divided by the transitions-weighted design effect of the models' clean
baselines (consecutive checks of one conversation are clustered, as in ``markov``).
``flagged`` when the interval's lower bound is above ``VERDICT_ROUTING_RATIO``.

What it does not see: routing on difficulty that does not show up in the previous verdict
(a conversation one SD harder handed off 1.65× as often moved the ratio to only ~1.06),
which biases Δ all the same. Only shadow continuation removes either bias.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

VERDICT_ROUTING_RATIO = 1.25
"""Lower bound of the ratio's interval above which routing is taken to follow failures."""


@dataclass(frozen=True)
class VerdictRouting:
    """Handoff rate after a failed check over the rate after a passed one (NaN without data)."""

    ratio: float
    ci_low: float
    ci_high: float
    after_fail: int
    after_pass: int
    flagged: bool


def verdict_routing(transitions: np.ndarray, deff: np.ndarray, z: float) -> VerdictRouting:
    """From (K, 3, 2, 2) transitions [model, handoff (true, false, unknown), from, to] and (K,)
    design effects."""
    t = np.asarray(transitions, dtype=float)[:, :2].sum(axis=-1)  # (K, 2 handoff, 2 from)
    out_of = t.sum(axis=1)  # (K, 2 from): decided transitions out of pass / fail
    w = out_of.sum(axis=1)
    d = np.maximum(np.asarray(deff, dtype=float), 1.0) if len(deff) else np.ones(len(t))
    scale = float(np.sum(w * d) / np.sum(w)) if np.sum(w) > 0 else 1.0
    h_pass, h_fail = float(t[:, 0, 0].sum()), float(t[:, 0, 1].sum())
    n_pass, n_fail = float(out_of[:, 0].sum()), float(out_of[:, 1].sum())
    if min(n_pass, n_fail) <= 0 or h_pass + h_fail <= 0:
        # No handoff at all (a one-model deployment): the ratio is 0/0. With ½ added to each
        # count it would be the pass/fail imbalance n_pass/n_fail, and flagged at 99.5% adherence.
        nan = float("nan")
        return VerdictRouting(nan, nan, nan, int(n_fail), int(n_pass), False)
    ratio = (h_fail / n_fail) / (h_pass / n_pass) if h_pass > 0 else float("inf")
    # log ratio with ½ added to each count; variance of a log ratio of two binomial proportions
    a, na, b, nb = h_fail + 0.5, n_fail + 0.5, h_pass + 0.5, n_pass + 0.5
    centre = np.log(a / na) - np.log(b / nb)
    se = float(np.sqrt(max(1 / a - 1 / na + 1 / b - 1 / nb, 0.0) * scale))
    lo, hi = float(np.exp(centre - z * se)), float(np.exp(centre + z * se))
    lo, hi = min(lo, ratio), max(hi, ratio)
    return VerdictRouting(ratio, lo, hi, int(n_fail), int(n_pass), lo > VERDICT_ROUTING_RATIO)
