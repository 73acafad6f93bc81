"""``ShadowStats``: a shadow runner's counters, as the collector reads them at scrape time."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ShadowStats:
    """Counters of a ``ShadowRunner`` (read at scrape time).

    Attributes:
        calls: (arm, outcome) → calls (``CALL_OUTCOMES``).
        skipped: reason → turns not shadowed (``policy.SKIP_REASONS``).
        checks: (arm, verdict) → the shadow replies' verdicts.
        pairs: arm → pairs recorded (one per shadow reply with at least one paired rule).
        tokens: tokens the shadow calls used (settled; dry runs, and sent calls that failed: the
            reserved upper bound).
        usd: what they cost (likewise).
        budget_used: window → amount used now (``calls`` per minute, ``tokens`` per hour, ``usd`` per day).
        budget_limit: window → its limit (``usd``: +Inf without a money cap).
        breaker_open: target → 1 while its shadow traffic is stopped, else 0.
        pending: picked turns queued or in flight.
    """

    calls: Mapping[tuple[str, str], int]
    skipped: Mapping[str, int]
    checks: Mapping[tuple[str, str], int]
    pairs: Mapping[str, int]
    tokens: float
    usd: float
    budget_used: Mapping[str, float]
    budget_limit: Mapping[str, float]
    breaker_open: Mapping[str, int]
    pending: int
