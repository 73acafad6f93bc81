"""Aggregate counters as one plain record: what the pipeline keeps and the refit reads.

The same record comes from a local aggregates snapshot, from Prometheus (summed over
replicas) or from CSV files, so the refit has one input type.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from handoffmon.types import Verdict

CELL_TOTAL = "*"
"""``depth_bucket`` of the whole-cell cluster sums in ``cell_stats``."""

CLUSTER_STATS: tuple[str, ...] = ("conversations", "y2", "yn", "n2")
"""Per cell, over conversations c with y_c passes in n_c checked turns: G = #c, Σy², Σyn, Σn²."""

CELL_STATS: tuple[str, ...] = ("depth", *CLUSTER_STATS)

POOLED_RULE = "all"
"""Rule name of cluster sums pooled over rules (the refit's pooled fit; reserved)."""


def cluster_increments(y: int, n: int, passed: bool) -> tuple[int, int, int, int]:
    """Increments of (G, Σy², Σyn, Σn²) when one more check lands in a conversation's cell.

    ``y``/``n`` are the conversation's passes/checks in that cell *before* this check.
    Every increment is ≥ 0, so the sums are monotone counters (Prometheus ``_total``):
    (n+1)² − n² = 2n + 1; (y+1)² − y² = 2y + 1 on a pass, else 0; (y+1)(n+1) − yn =
    y + n + 1 on a pass, else y.
    """
    if passed:
        return int(n == 0), 2 * y + 1, y + n + 1, 2 * n + 1
    return int(n == 0), 0, y, 2 * n + 1


class CheckKey(NamedTuple):
    """Key of ``checks``: one rule's verdict on turns by ``model`` after ``prefix_model``."""

    rule: str
    model: str
    prefix_model: str
    depth_bucket: str
    verdict: Verdict


class TransitionKey(NamedTuple):
    """Key of ``transitions``: consecutive verdicts of a rule in one conversation.

    ``model`` authored the later turn; ``handoff`` is ``"true"``, ``"false"`` or
    ``"unknown"`` for that later turn.
    """

    rule: str
    model: str
    handoff: str
    from_verdict: Verdict
    to_verdict: Verdict


class CellStatKey(NamedTuple):
    """Key of ``cell_stats``: a per-cell sum the conversation-clustered refit needs.

    ``stat`` is one of ``CELL_STATS``. ``depth`` is kept per depth bucket (Σ depth of
    the cell's checked turns, for the within-bucket depth adjustment); the cluster sums
    ``conversations``, ``y2``, ``yn``, ``n2`` cover the whole cell (``depth_bucket`` is
    ``CELL_TOTAL``) and, with ``rule`` = ``"all"``, the checks of every rule together.
    On the diagonal (``prefix_model == model``) every stat describes the **clean
    baseline**: same-author turns whose history holds no other model's text.
    """

    rule: str
    model: str
    prefix_model: str
    depth_bucket: str
    stat: str


class TurnKey(NamedTuple):
    """Key of ``turns``."""

    model: str
    prefix_model: str
    depth_bucket: str
    handoff: str


@dataclass(frozen=True)
class Counts:
    """All refit inputs, as counters. Frozen by convention; ``merge`` returns a new one.

    Attributes:
        checks: verdict counts by (rule, model, prefix_model, depth_bucket, verdict).
        transitions: by (rule, model, handoff, from_verdict, to_verdict).
        turns: by (model, prefix_model, depth_bucket, handoff).
        attributions: earlier-message attributions by method (chain/content/unknown).
        monitor_errors: handoffmon's own failures by stage.
        dropped: turns dropped because the queue was full.
        session_lengths: histogram of final depth per finished/expired conversation
            (depth → count); optional, feeds ``shapes export``.
        baseline_checks: verdicts of **clean** same-author turns (prefix = author and no
            other model's text anywhere in the history), keyed like ``checks`` with
            ``prefix_model == model``; the refit's B→B baseline. Empty for sources that
            predate it (the refit then falls back to every same-author turn).
        cell_stats: per-cell sums for clustered intervals and the depth adjustment
            (see ``CellStatKey``); empty for sources that predate them.
    """

    checks: Mapping[CheckKey, int] = field(default_factory=dict)
    transitions: Mapping[TransitionKey, int] = field(default_factory=dict)
    turns: Mapping[TurnKey, int] = field(default_factory=dict)
    attributions: Mapping[str, int] = field(default_factory=dict)
    monitor_errors: Mapping[str, int] = field(default_factory=dict)
    dropped: int = 0
    session_lengths: Mapping[int, int] = field(default_factory=dict)
    baseline_checks: Mapping[CheckKey, int] = field(default_factory=dict)
    cell_stats: Mapping[CellStatKey, int] = field(default_factory=dict)

    def merge(self, other: Counts) -> Counts:
        """Sum two snapshots (e.g. two replicas)."""

        def add(a: Mapping, b: Mapping) -> dict:  # type: ignore[type-arg]
            c: Counter = Counter(a)  # type: ignore[type-arg]
            c.update(b)
            return dict(c)

        return Counts(
            checks=add(self.checks, other.checks),
            transitions=add(self.transitions, other.transitions),
            turns=add(self.turns, other.turns),
            attributions=add(self.attributions, other.attributions),
            monitor_errors=add(self.monitor_errors, other.monitor_errors),
            dropped=self.dropped + other.dropped,
            session_lengths=add(self.session_lengths, other.session_lengths),
            baseline_checks=add(self.baseline_checks, other.baseline_checks),
            cell_stats=add(self.cell_stats, other.cell_stats),
        )

    @property
    def total_turns(self) -> int:
        """Number of turns counted."""
        return sum(self.turns.values())
