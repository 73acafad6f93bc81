"""Shadow continuation's counters (calls, skips, checks, spend) and budget/breaker state, at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.shadow.stats import ShadowStats


class ShadowCollector(Collector):
    """Exposes a ``ShadowRunner``'s ``stats``. Every label is bounded: arms, outcomes, skip
    reasons and verdicts are fixed sets, targets are the ``shadow.targets`` allowlist.

    Shadow calls are counted only here, never as served turns.

    Args:
        stats: returns the runner's ``ShadowStats``.
    """

    def __init__(self, stats: Callable[[], ShadowStats]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        s = self._stats()
        calls = CounterMetricFamily(
            "handoffmon_shadow_calls",
            "Shadow continuation calls by arm (handoff, no_handoff) and outcome (ok; rate_limited, "
            "server_error, timeout, error: failed; wrong_author: another model answered; dry_run: "
            "decided but not made).",
            labels=["arm", "outcome"],
        )
        for (arm, outcome), n in sorted(s.calls.items()):
            calls.add_metric([arm, outcome], n)
        yield calls
        skipped = CounterMetricFamily(
            "handoffmon_shadow_skipped",
            "Turns offered for shadow continuation that got no shadow call, by reason (not_sampled, "
            "budget_calls, budget_tokens, budget_money, quota, breaker_open, busy, ...).",
            labels=["reason"],
        )
        for reason, n in sorted(s.skipped.items()):
            skipped.add_metric([reason], n)
        yield skipped
        checks = CounterMetricFamily(
            "handoffmon_shadow_checks",
            "Rule verdicts of shadow replies by arm and verdict (never counted as served turns).",
            labels=["arm", "verdict"],
        )
        for (arm, verdict), n in sorted(s.checks.items()):
            checks.add_metric([arm, verdict], n)
        yield checks
        pairs = CounterMetricFamily(
            "handoffmon_shadow_pairs",
            "Shadow pairs recorded for the switch-cost refit, by arm.",
            labels=["arm"],
        )
        for arm, n in sorted(s.pairs.items()):
            pairs.add_metric([arm], n)
        yield pairs
        yield CounterMetricFamily(
            "handoffmon_shadow_tokens",
            "Tokens used by shadow calls (dry run: their reserved bound).",
            value=s.tokens,
        )
        yield CounterMetricFamily(
            "handoffmon_shadow_spend_usd",
            "USD spent on shadow calls, priced from the deployments or litellm's cost map (dry run: "
            "the reserved bound).",
            value=s.usd,
        )
        used = GaugeMetricFamily(
            "handoffmon_shadow_budget_used",
            "Shadow budget used in its sliding window now: calls (per minute), tokens (per hour), "
            "usd (per day); in-flight calls count at their upper bound.",
            labels=["window"],
        )
        limit = GaugeMetricFamily(
            "handoffmon_shadow_budget_limit",
            "Limit of each shadow budget window (usd: +Inf without a money cap).",
            labels=["window"],
        )
        for window in sorted(s.budget_used):
            used.add_metric([window], s.budget_used[window])
            limit.add_metric([window], s.budget_limit[window])
        yield used
        yield limit
        breaker = GaugeMetricFamily(
            "handoffmon_shadow_breaker_open",
            "1 while a shadow target's circuit breaker stops its shadow traffic (after "
            "shadow.breaker_failures consecutive 429/5xx/timeouts), else 0.",
            labels=["target"],
        )
        for target, flag in sorted(s.breaker_open.items()):
            breaker.add_metric([target], flag)
        yield breaker
        yield GaugeMetricFamily(
            "handoffmon_shadow_pending", "Picked turns waiting for or in a shadow call.", value=s.pending
        )
