"""What a running routing policy shares between threads: the latest table and the decision counters."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from handoffmon.config import RoutingConfig
from handoffmon.refit.result import ALL_RULES, RefitResult
from handoffmon.routing.policy import OUTCOMES, Candidate, Decision, FallbackPolicy, Outcome
from handoffmon.routing.table import PairRiskTable

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.ingress.request import ResponseLink
    from handoffmon.routing.prefix import PrefixLookup

_log = logging.getLogger("handoffmon.routing")

MODES: tuple[str, ...] = ("dry_run", "enforce")


class TableHolder:
    """The latest published ``PairRiskTable``: written by the refit thread, read lock-free.

    Publishing replaces one reference (atomic in CPython), so a request reads either the
    old table or the new one, never a half-built one.

    Args:
        rule: which fit of each refit to publish (``routing.rule``).
        on_failure: called when a refit cannot be turned into a table (counted as a
            refit failure by the runtime).
        source: the ``source`` of the refits this holder's runtime makes (its periodic refit's
            counts: ``local``, a multiprocess directory, a SQLite file); a refit of any other
            source is refused unless published with ``foreign=True``. ``None``: any source.
    """

    __slots__ = ("_on_failure", "rule", "source", "table")

    def __init__(
        self,
        rule: str = ALL_RULES,
        *,
        on_failure: Callable[[], object] | None = None,
        source: str | None = None,
    ) -> None:
        self.rule = rule
        self.table: PairRiskTable | None = None
        self._on_failure = on_failure
        self.source = source

    def publish(self, result: RefitResult, *, foreign: bool = False) -> bool:
        """Build and install the table of ``result``; False (table kept) on failure. Never raises.

        A refit of counts other than this runtime's own (``result.source`` is not ``source``: a
        refit document of another deployment, a Prometheus job's) is refused, counted as a
        failure, unless ``foreign``: the pairs' names may match this router's groups while the
        risks describe other traffic."""
        if self.source is not None and result.source != self.source and not foreign:
            _log.warning(
                "handoffmon refused a routing table from a refit of %r: this runtime refits %r "
                "(publish(result, foreign=True) to route by it)",
                result.source,
                self.source,
            )
            if self._on_failure is not None:
                self._on_failure()
            return False
        try:
            self.table = PairRiskTable.from_refit(result, rule=self.rule)
        except Exception:
            _log.warning("handoffmon could not build the routing table", exc_info=True)
            if self._on_failure is not None:
                self._on_failure()
            return False
        return True

    def clear(self) -> None:
        """Forget the table (the router's own order from now on)."""
        self.table = None


class DecisionCounts:
    """``handoffmon_routing_decisions_total{mode, outcome}`` as plain counters (read at scrape time).

    Every (mode, outcome) starts at 0 so dashboards show 0, not "No data".
    """

    __slots__ = ("_counts", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {(m, o): 0 for m in MODES for o in OUTCOMES}

    def count(self, mode: str, outcome: Outcome) -> None:
        """Count one decision."""
        key = (mode, outcome)
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1

    def snapshot(self) -> dict[tuple[str, str], int]:
        """Counts by (mode, outcome)."""
        with self._lock:
            return dict(self._counts)


class RoutingState:
    """One runtime's routing: settings, policy, latest table and decision counters.

    The runtime builds it when ``routing.enabled`` (its periodic refit publishes into
    ``holder``); every adapter of that runtime decides with it.

    Args:
        settings: the ``routing`` section.
        on_failure: called when a refit cannot become a table.
    """

    __slots__ = ("counts", "holder", "policy", "settings")

    def __init__(self, settings: RoutingConfig, *, on_failure: Callable[[], object] | None = None) -> None:
        self.settings = settings
        self.policy = FallbackPolicy(settings)
        self.holder = TableHolder(settings.rule, on_failure=on_failure)
        self.counts = DecisionCounts()

    def route(
        self,
        candidates: Sequence[Candidate],
        messages: Sequence[Any],
        lookup: PrefixLookup,
        *,
        now: float,
        healthy: Callable[[str], bool] | None = None,
        link: ResponseLink | None = None,
    ) -> Decision:
        """One request's decision, counted: every adapter's step between reading the candidates
        and applying the order (the prefix lookup is skipped when there is nothing to decide).
        ``link``: a Responses API call's link to a history the provider keeps (the prefix is
        read from what was recorded of it, ``PrefixLookup.authors``).

        Raises whatever the lookup raises; adapters count that as ``error`` and fail open.
        """
        table = self.holder.table
        early = self.policy.precheck(table, len(candidates), now)
        if early is not None:
            decision = Decision(tuple(candidates), early)
        else:
            prefix, home = lookup.authors(messages, home=self.settings.return_home, link=link)
            decision = self.policy.decide(
                table, prefix, candidates, now=now, home_model=home, healthy=healthy
            )
        self.counts.count(self.settings.mode, decision.outcome)
        return decision

    @property
    def enforcing(self) -> bool:
        """Whether decisions change the order (``mode: enforce``), not only count."""
        return self.settings.mode == "enforce"

    def table_age_s(self, now: float) -> float | None:
        """Seconds since the published table's refit (``None``: no table)."""
        table = self.holder.table
        return None if table is None else table.age_s(now)
