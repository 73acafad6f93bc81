"""Shadow continuation's counters (calls, skips, checks, spend) and budget/breaker state, at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from handoffmon.exporters.serving import mirror_to_files

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.shadow.stats import ShadowStats


class ShadowCollector(Collector):
    """Exposes a ``ShadowRunner``'s ``stats``. Every label is bounded: arms, outcomes, skip
    reasons and verdicts are fixed sets, targets are the ``shadow.targets`` allowlist.

    Shadow calls are counted only here, never as served turns. Under ``PROMETHEUS_MULTIPROC_DIR``
    the counters and the gauges are also written to the files (``FileMirror``): a multiprocess
    ``/metrics`` sums the counters over workers, the budgets and pending calls over live workers
    (each worker has its own budget), and shows a target's breaker open while any live worker's
    is, each as of the worker's last write.

    Args:
        stats: returns the runner's ``ShadowStats``.
        files: also write the series to the multiprocess files (``PROMETHEUS_MULTIPROC_DIR``).
    """

    file_gauges: ClassVar[Mapping[str, str]] = {
        "handoffmon_shadow_budget_used": "livesum",
        "handoffmon_shadow_budget_limit": "livesum",
        "handoffmon_shadow_breaker_open": "livemax",
        "handoffmon_shadow_pending": "livesum",
    }
    """Gauges a multiprocess ``/metrics`` serves (``FileMirror``), combined over live workers so."""

    def __init__(self, stats: Callable[[], ShadowStats], *, files: bool = True) -> None:
        self._stats = stats
        # files=False: read by OpenTelemetry only, with Prometheus off (nothing to write for it)
        self._files = mirror_to_files(self) if files else None

    def collect(self) -> Iterator[Metric]:
        s = self._stats()
        yield _family(
            CounterMetricFamily,
            "handoffmon_shadow_calls",
            "Shadow continuation calls by arm (handoff, no_handoff) and outcome (ok; rate_limited, "
            "server_error, timeout, misconfigured (401/403/404), error: failed; wrong_author: "
            "another model answered; dry_run: decided but not made).",
            ("arm", "outcome"),
            s.calls,
        )
        yield _family(
            CounterMetricFamily,
            "handoffmon_shadow_skipped",
            "Turns offered for shadow continuation that got no shadow call, by reason (not_sampled, "
            "budget_calls, budget_tokens, budget_money, quota, conversation_quota, breaker_open, busy, ...).",
            ("reason",),
            s.skipped,
        )
        yield _family(
            CounterMetricFamily,
            "handoffmon_shadow_checks",
            "Rule verdicts of shadow replies by arm and verdict (never counted as served turns).",
            ("arm", "verdict"),
            s.checks,
        )
        yield _family(
            CounterMetricFamily,
            "handoffmon_shadow_pairs",
            "Shadow pairs recorded for the switch-cost refit, by arm.",
            ("arm",),
            s.pairs,
        )
        yield CounterMetricFamily(
            "handoffmon_shadow_tokens",
            "Tokens used by shadow calls, as reported (dry run, and a sent call that failed: the "
            "upper bound reserved for it).",
            value=s.tokens,
        )
        yield CounterMetricFamily(
            "handoffmon_shadow_spend_usd",
            "USD spent on shadow calls, priced from the deployments or litellm's cost map (dry run, "
            "and a sent call that failed: the upper bound reserved for it).",
            value=s.usd,
        )
        yield _family(
            GaugeMetricFamily,
            "handoffmon_shadow_budget_used",
            "Shadow budget used in its sliding window now: calls (per minute), tokens (per hour), "
            "usd (per day); in-flight calls count at their upper bound.",
            ("window",),
            s.budget_used,
        )
        yield _family(
            GaugeMetricFamily,
            "handoffmon_shadow_budget_limit",
            "Limit of each shadow budget window (usd: +Inf without a money cap).",
            ("window",),
            s.budget_limit,
        )
        yield _family(
            GaugeMetricFamily,
            "handoffmon_shadow_breaker_open",
            "1 while a shadow target's circuit breaker stops its shadow traffic (after "
            "shadow.breaker_failures consecutive 429/5xx/timeouts/401/403/404), else 0.",
            ("target",),
            s.breaker_open,
        )
        yield GaugeMetricFamily(
            "handoffmon_shadow_pending", "Picked turns waiting for or in a shadow call.", value=s.pending
        )


def _family(
    kind: type[CounterMetricFamily] | type[GaugeMetricFamily],
    name: str,
    doc: str,
    labels: tuple[str, ...],
    values: Mapping[Any, float],
) -> Metric:
    """One labelled family; a key is a label value, or a tuple of them for several labels."""
    family = kind(name, doc, labels=list(labels))
    for key, value in sorted(values.items()):
        family.add_metric(list(key) if isinstance(key, tuple) else [key], value)
    return family
