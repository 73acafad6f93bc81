"""The fallback-ordering policy: a router's candidates reordered by pair risk, conservatively.

Pure and small: a decision is a few dict lookups and comparisons (microseconds; see
``tests/benchmarks/bench_routing.py``). Everything request-specific comes in as
arguments, so the wrapped Router, the LiteLLM Proxy hook and ``serve`` are thin adapters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from handoffmon.config import RoutingConfig
from handoffmon.routing.table import PairRiskTable
from handoffmon.types import NO_PREFIX, UNKNOWN_MODEL

Outcome = Literal["reordered", "home", "unchanged", "no_prefix", "no_table", "stale", "single", "error"]
OUTCOMES: Final[tuple[Outcome, ...]] = (
    "reordered",
    "home",
    "unchanged",
    "no_prefix",
    "no_table",
    "stale",
    "single",
    "error",
)
"""Every decision's outcome (the ``outcome`` label of ``handoffmon_routing_decisions_total``):
``reordered`` / ``home`` changed (or in dry-run would have changed) the order — ``home``
when the conversation's original model was moved first; ``unchanged`` the policy kept the
router's order; the rest kept it without deciding: ``no_prefix`` (depth 1 or the previous
author is unknown), ``no_table`` / ``stale`` (no refit published, or older than
``max_table_age_s`` or stamped over ``MAX_FUTURE_S`` ahead), ``single`` (fewer than two
candidates), ``error`` (the adapter failed)."""

UNCHANGED_OUTCOMES: Final = frozenset(o for o in OUTCOMES if o not in ("reordered", "home"))

MAX_ORDERED: Final = 32
"""Candidates a decision orders at most: the first 32 of a request's fallbacks; any later ones
keep their places after them. The order is an insertion sort, quadratic in the candidates, and
a request may carry its own list (a LiteLLM Proxy body, ``serve``): 4,000 entries took 2.9 s on
the request path (the proxy's event loop), 40,000 would take minutes."""

MAX_FUTURE_S: Final = 300.0
"""A table stamped more than this many seconds after the clock now is ``stale``, not fresh: it was
made on another clock (a document published by a program, a host whose clock runs ahead) or this
clock was stepped back. Judged fresh, it would stay fresh for ``max_table_age_s`` plus however far
ahead it is (a day ahead: a day longer than configured). Five minutes allows for ordinary skew."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One fallback target as the router names it, with what the policy may weigh.

    Attributes:
        group: the router's name for it (a model group).
        model: the canonical model serving it; ``None`` when several models or none do
            (the policy then never moves it, nor anything past it).
        cost_usd_per_mtok: input + output price per million tokens (``None`` = unknown).
        latency_s: the router's latency statistic for it (``None`` = unknown).
    """

    group: str
    model: str | None
    cost_usd_per_mtok: float | None = None
    latency_s: float | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """The order to use and why.

    Attributes:
        order: the candidates in the order the policy chose (the router's own order
            unless ``outcome`` is ``reordered`` or ``home``).
        outcome: one of ``OUTCOMES``.
    """

    order: tuple[Candidate, ...]
    outcome: Outcome

    @property
    def changed(self) -> bool:
        """Whether the order differs from the router's."""
        return self.outcome not in UNCHANGED_OUTCOMES

    @property
    def groups(self) -> list[str]:
        """The order as router group names."""
        return [c.group for c in self.order]


_NO_PREFIXES: Final = frozenset({NO_PREFIX, UNKNOWN_MODEL, ""})


class FallbackPolicy:
    """Orders a request's fallback candidates by what the table knows of continuing its prefix model.

    Candidate C moves ahead of an earlier candidate B only when (1) both pairs have a
    score of one kind (``PairRiskTable.compare``: shadow switch costs when both have one,
    else the sharper of the observed depth-standardized adherence after the prefix model
    and the fitted handoff risk; same-author continuation is 0 as a switch cost and as a
    risk), (2) C's score is strictly better, by at least ``min_effect_pp`` and by ``z`` standard
    errors of the difference (``sqrt(se_B² + se_C²)``; for risks conservative, it ignores
    the shared μ + π_A terms that cancel), and (3) C is not more expensive or slower than
    B by more than the caps. Otherwise the router's own order stands: a stable insertion
    sort with that partial comparison. With ``return_home`` the conversation's first
    author goes first when it is a candidate, healthy, within the caps, and no candidate
    ahead of it is significantly safer (the gate of (1)-(2) the other way round). A missing or
    stale table returns the router's order exactly.

    Args:
        settings: the ``routing`` configuration section.
    """

    __slots__ = ("_cost_cap", "_home", "_latency_cap", "_max_age_s", "_min_effect", "_z")

    def __init__(self, settings: RoutingConfig) -> None:
        self._min_effect = settings.min_effect_pp / 100.0
        self._z = settings.z
        self._max_age_s = settings.max_table_age_s
        self._home = settings.return_home
        self._cost_cap = settings.max_extra_cost_usd_per_mtok
        self._latency_cap = settings.max_extra_latency_s

    def decide(
        self,
        table: PairRiskTable | None,
        prefix_model: str | None,
        candidates: Sequence[Candidate],
        *,
        now: float,
        home_model: str | None = None,
        healthy: Callable[[str], bool] | None = None,
    ) -> Decision:
        """The order to try ``candidates`` in (router order unless the table says otherwise).

        Args:
            table: the latest published table (``None``: none yet).
            prefix_model: author of the conversation's last assistant message.
            candidates: the router's fallbacks for the requested group, in its order.
            now: wall-clock seconds (staleness).
            home_model: author of the conversation's first reply (``return_home``).
            healthy: whether a candidate group may serve now (default: all may).
        """
        own = tuple(candidates)
        early = self.precheck(table, len(own), now)
        if early is not None:
            return Decision(own, early)
        assert table is not None
        if prefix_model is None or prefix_model in _NO_PREFIXES:
            return Decision(own, "no_prefix")
        out: list[Candidate] = []
        for c in own[:MAX_ORDERED]:
            pos = len(out)
            while pos and self._better(table, prefix_model, c, out[pos - 1]):
                pos -= 1
            out.insert(pos, c)
        out.extend(own[MAX_ORDERED:])
        outcome: Outcome = "reordered" if out != list(own) else "unchanged"
        if self._home and home_model and home_model not in _NO_PREFIXES:
            outcome = self._go_home(table, prefix_model, out, home_model, healthy, outcome)
        return Decision(tuple(out), outcome if out != list(own) else "unchanged")

    def precheck(self, table: PairRiskTable | None, n_candidates: int, now: float) -> Outcome | None:
        """The outcome when there is nothing to decide (``single``, ``no_table``, ``stale``), else None.

        Adapters call it before paying for the prefix lookup.
        """
        if n_candidates < 2:
            return "single"
        if table is None:
            return "no_table"
        if not -MAX_FUTURE_S <= now - table.created_at <= self._max_age_s:  # NaN: not fresh, stale
            return "stale"
        return None

    def _better(self, table: PairRiskTable, prefix: str, c: Candidate, b: Candidate) -> bool:
        """Whether ``c`` may move ahead of ``b``: significantly lower risk, within the caps."""
        return self._safer(table, prefix, c, b) and self._within_caps(c, b)

    def _safer(self, table: PairRiskTable, prefix: str, c: Candidate, b: Candidate) -> bool:
        """Whether the table says ``c`` is safer than ``b`` by ``min_effect_pp`` and ``z`` SEs, in
        the sharpest kind of score both have, and no other kind both have says ``b`` is safer by
        that gate. Observed adherence and fitted risk are different contrasts and may disagree
        (a model good on its own that loses more on a handoff); which is sharper can change
        with every refit, so acting on either alone would flip the order back and forth."""
        if c.model is None or b.model is None:
            return False
        diffs = table.differences(prefix, c.model, b.model)
        if not diffs:
            return False  # no kind of score both have: different contrasts are never compared
        diff, se, kind = min(diffs, key=lambda d: d[1])  # as ``PairRiskTable.compare``
        if not self._gate(diff, se):
            return False
        return not any(self._gate(-d, s) for d, s, k in diffs if k != kind)

    def _gate(self, diff: float, se: float) -> bool:
        """A difference large and sure enough to act on. Equal scores (even with
        ``min_effect_pp`` and ``z`` at 0) are not: the router's order stands."""
        return diff > 0 and diff >= self._min_effect and diff >= self._z * se

    def _within_caps(self, c: Candidate, b: Candidate) -> bool:
        return _within(self._cost_cap, c.cost_usd_per_mtok, b.cost_usd_per_mtok) and _within(
            self._latency_cap, c.latency_s, b.latency_s
        )

    def _go_home(
        self,
        table: PairRiskTable,
        prefix: str,
        out: list[Candidate],
        home: str,
        healthy: Callable[[str], bool] | None,
        outcome: Outcome,
    ) -> Outcome:
        """Move the home model's candidate first (in place) when healthy, within the caps, and no
        candidate ahead of it is significantly safer by the table (a preference, never against
        the evidence: the table's prefix → home pair is a handoff like any other)."""
        k = next((i for i, c in enumerate(out) if c.model == home), 0)
        if k == 0:
            return outcome
        c = out[k]
        if healthy is not None and not healthy(c.group):
            return outcome
        if not all(self._within_caps(c, b) and not self._safer(table, prefix, b, c) for b in out[:k]):
            return outcome
        del out[k]
        out.insert(0, c)
        return "home"


def _within(cap: float | None, c: float | None, b: float | None) -> bool:
    """``c`` exceeds ``b`` by at most ``cap`` (no cap: always; a cap with an unknown side: never)."""
    if cap is None:
        return True
    return c is not None and b is not None and c - b <= cap
