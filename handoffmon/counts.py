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
    """

    checks: Mapping[CheckKey, int] = field(default_factory=dict)
    transitions: Mapping[TransitionKey, int] = field(default_factory=dict)
    turns: Mapping[TurnKey, int] = field(default_factory=dict)
    attributions: Mapping[str, int] = field(default_factory=dict)
    monitor_errors: Mapping[str, int] = field(default_factory=dict)
    dropped: int = 0
    session_lengths: Mapping[int, int] = field(default_factory=dict)

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
        )

    @property
    def total_turns(self) -> int:
        """Number of turns counted."""
        return sum(self.turns.values())
