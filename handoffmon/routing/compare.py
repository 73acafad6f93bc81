"""Two runs of the same conversations compared: adherence after fallbacks, paired by conversation."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class ArmTotals:
    """One run's totals over the compared conversations.

    Attributes:
        turns: replies received.
        fallback_turns: replies served by another group's model than the one asked for.
        checks: pass + fail verdicts on fallback turns.
        passes: pass verdicts on fallback turns.
        expected_passes: planted P(pass) summed over the same checks (NaN when unknown).
        fallback_attempts: fallback hops the router made (``x-litellm-attempted-fallbacks``).
        failed_turns: calls that failed after every fallback.
        cost_usd: the router's ``response_cost`` summed over replies.
    """

    turns: int
    fallback_turns: int
    checks: int
    passes: int
    expected_passes: float = math.nan
    fallback_attempts: int = 0
    failed_turns: int = 0
    cost_usd: float = 0.0

    @property
    def adherence(self) -> float:
        """Pass share of the checks on fallback turns."""
        return self.passes / self.checks if self.checks else math.nan


@dataclass(frozen=True)
class RoutingComparison:
    """Risk-aware order vs the router's own order on the same conversations.

    Attributes:
        conversations: conversations run in each arm (the clusters).
        router: totals of the router's-order run.
        risk: totals of the risk-aware run.
        delta_pp: adherence after fallbacks, risk-aware minus router, in percentage points.
        ci_low_pp: lower bound of its paired conversation-bootstrap interval.
        ci_high_pp: upper bound.
        predicted_pp: the same difference of planted pass probabilities (NaN without a
            planted truth).
        confidence: interval level.
        resamples: bootstrap resamples.
        decisions: the risk-aware run's routing decisions by outcome.
    """

    conversations: int
    router: ArmTotals
    risk: ArmTotals
    delta_pp: float
    ci_low_pp: float
    ci_high_pp: float
    predicted_pp: float
    confidence: float = 0.95
    resamples: int = 2000
    decisions: Mapping[str, int] = field(default_factory=dict)

    @property
    def cost(self) -> str:
        """What the new order cost: fallback hops, failed turns and money, vs the router's order."""
        hops = self.risk.fallback_attempts - self.router.fallback_attempts
        base = self.router.fallback_attempts
        share = f" ({100 * hops / base:+.1f}%)" if base else ""
        failed = self.risk.failed_turns - self.router.failed_turns
        usd = self.risk.cost_usd - self.router.cost_usd
        return f"{hops:+d} fallback attempts{share}, {failed:+d} failed turns, ${usd:+.4f}"

    def line(self) -> str:
        """The demo's summary line."""
        return (
            f"Risk-aware ordering: adherence after fallbacks {self.delta_pp:+.1f} pp "
            f"[{self.ci_low_pp:+.1f}, {self.ci_high_pp:+.1f}] vs the router's order "
            f"(predicted {self.predicted_pp:+.1f} pp), cost {self.cost}"
        )


def paired_difference(
    passes_a: np.ndarray,
    checks_a: np.ndarray,
    passes_b: np.ndarray,
    checks_b: np.ndarray,
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Ratio difference B − A of pooled pass shares, with a paired conversation-bootstrap interval.

    Element ``i`` of every array belongs to conversation ``i`` (run in both arms); a
    resample draws conversations with replacement and keeps both arms of each, so the
    interval reflects both the clustering of turns within a conversation and the pairing.

    Returns:
        (estimate, percentile lower bound, upper bound); NaN when either arm has no checks.
    """
    arrays = [np.asarray(x, dtype=float) for x in (passes_a, checks_a, passes_b, checks_b)]
    pa, na, pb, nb = arrays
    if na.sum() == 0 or nb.sum() == 0:
        return math.nan, math.nan, math.nan
    est = float(pb.sum() / nb.sum() - pa.sum() / na.sum())
    rng = np.random.default_rng(seed)
    n = len(pa)
    diffs = np.empty(resamples)
    chunk = max(1, 2_000_000 // max(n, 1))
    for start in range(0, resamples, chunk):
        idx = rng.integers(0, n, size=(min(chunk, resamples - start), n))
        with np.errstate(invalid="ignore", divide="ignore"):
            d = pb[idx].sum(1) / nb[idx].sum(1) - pa[idx].sum(1) / na[idx].sum(1)
        diffs[start : start + len(d)] = d
    diffs = diffs[np.isfinite(diffs)]
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(diffs, [alpha, 1 - alpha])
    return est, float(lo), float(hi)
