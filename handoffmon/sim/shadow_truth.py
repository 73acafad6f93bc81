"""The demo's planted switch costs: what each live shadow pair's two continuations should pass with.

For every recorded shadow pair the simulator knows the prefix it continued (depth and the
previous turn's intended verdicts, from its own bookkeeping), so the planted switch cost
of (A → B) is the mean over the pairs' checked rules of P(B passes) − P(A passes) on
that very prefix — the quantity ``RuleFit.switch_costs`` estimates (as
``sim.shadow_arm.planted_switch_costs`` for the population simulator).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from handoffmon.refit.result import ALL_RULES, RefitResult
from handoffmon.shadow import Decision
from handoffmon.shadow.turns import ShadowTurn
from handoffmon.sim.dynamics import Dynamics
from handoffmon.sim.provider import SimProvider
from handoffmon.sim.truth import pearson

Cell = tuple[str, str, str]
"""(rule, prefix model A, model B); rule ``all`` pools every rule."""


class ShadowTruth:
    """Accumulates the planted switch cost of the pairs a demo's ``ShadowRunner`` records.

    Set ``runtime.shadow.on_pair = truth.add``.
    """

    def __init__(self, provider: SimProvider) -> None:
        self._provider = provider
        self._dynamics = Dynamics(provider.fleet)
        self._lock = threading.Lock()
        self._sums: dict[Cell, list[float]] = {}
        self.unknown = 0
        """Pairs whose prefix the simulator did not know (left out)."""

    def add(self, turn: ShadowTurn, decision: Decision, verdicts: Mapping[str, tuple[bool, bool]]) -> None:
        """Add one recorded pair (its checked rules)."""
        a, b = decision.prefix_model, decision.model
        depth, prev = self._provider.previous(turn.offer.messages)
        if prev is None or prev.author != a:
            with self._lock:
                self.unknown += 1
            return
        p_b = self._dynamics.probabilities(b, a, depth, prev.intent)
        p_a = self._dynamics.probabilities(a, a, depth, prev.intent)
        with self._lock:
            for rule in verdicts:
                diff = p_b[rule] - p_a[rule]
                for cell in ((rule, a, b), (ALL_RULES, a, b)):
                    acc = self._sums.setdefault(cell, [0.0, 0.0])
                    acc[0] += diff
                    acc[1] += 1

    def planted(self) -> dict[Cell, float]:
        """Planted switch cost per (rule, A, B) with pairs."""
        with self._lock:
            return {cell: s / n for cell, (s, n) in self._sums.items() if n}

    def to_list(self) -> list[dict[str, Any]]:
        """JSON-ready entries for ``handoffmon-truth.json``'s ``switch_costs``."""
        with self._lock:
            return [
                {"rule": r, "prefix_model": a, "model": b, "planted": s / n, "n_pairs": int(n)}
                for (r, a, b), (s, n) in sorted(self._sums.items())
                if n
            ]


@dataclass(frozen=True)
class ShadowRecovery:
    """Planted vs estimated switch costs of one run, over the per-rule (rule, A, B) entries.

    Attributes:
        n: entries compared (a refit switch cost with a finite interval and a planted value).
        pairs: shadow pairs behind them (rule-level pair checks).
        pearson: correlation of planted and experimental estimates.
        coverage: share of entries whose interval holds the planted value.
        pearson_observational: correlation of planted and the observational s(A→B) − s(A→A)
            of the same entries (where estimable).
    """

    n: int
    pairs: int
    pearson: float
    coverage: float
    pearson_observational: float

    def line(self) -> str:
        """The demo's stdout line."""
        return (
            f"Shadow recovery: Pearson {self.pearson:.3f}, coverage {self.coverage:.2f} over {self.n} pairs; "
            f"observational Pearson {self.pearson_observational:.3f}"
        )


def recover_switch_costs(result: RefitResult, planted: Mapping[Cell, float]) -> ShadowRecovery:
    """Compare the refit's per-rule switch costs with the planted ones."""
    rows = [
        (sc, planted[(rule, sc.prefix_model, sc.model)])
        for rule, fit in result.rules.items()
        if rule != ALL_RULES
        for sc in fit.switch_costs
        if (rule, sc.prefix_model, sc.model) in planted
        and math.isfinite(sc.ci_low)
        and math.isfinite(sc.ci_high)
    ]
    obs = [(sc.observational, p) for sc, p in rows if math.isfinite(sc.observational)]
    return ShadowRecovery(
        n=len(rows),
        pairs=sum(sc.n_pairs for sc, _ in rows),
        pearson=pearson([p for _, p in rows], [sc.estimate for sc, _ in rows]),
        coverage=sum(sc.ci_low <= p <= sc.ci_high for sc, p in rows) / len(rows) if rows else float("nan"),
        pearson_observational=pearson([p for _, p in obs], [o for o, _ in obs]),
    )
