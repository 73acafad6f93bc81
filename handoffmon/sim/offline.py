"""Counts straight from the planted model, without Router, text or checkers (fast fixtures).

What the pipeline would record if every checker verdict equalled the simulator's intent
(which the end-to-end tests show it does). Routing follows ``TrafficPolicy`` and the first
fallback of a failing group; useful for report tests, refit benchmarks and sizing runs.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from handoffmon.counts import CheckKey, Counts, TransitionKey, TurnKey
from handoffmon.depth import DepthBuckets
from handoffmon.sim.driver import TrafficPolicy
from handoffmon.sim.dynamics import Dynamics
from handoffmon.sim.fleet import Fleet
from handoffmon.types import NO_PREFIX


def _verdict(ok: bool) -> str:
    return "pass" if ok else "fail"


def _author(fleet: Fleet, group: str, rng: np.random.Generator) -> str:
    """The deployment that serves ``group`` this turn (its first fallback when a failure is injected)."""
    model = fleet.by_group(group)
    if rng.random() < model.rate_limit_rate + model.timeout_rate and fleet.fallbacks.get(group):
        return fleet.by_group(fleet.fallbacks[group][0]).name
    return model.name


def simulate_counts(
    fleet: Fleet,
    conversations: int,
    *,
    seed: int = 0,
    policy: TrafficPolicy | None = None,
    buckets: DepthBuckets | None = None,
) -> Counts:
    """Simulate ``conversations`` conversations and count checks, transitions and turns."""
    policy = policy or TrafficPolicy()
    buckets = buckets or DepthBuckets()
    dyn = Dynamics(fleet)
    rng = np.random.default_rng(seed)
    checks: Counter[CheckKey] = Counter()
    transitions: Counter[TransitionKey] = Counter()
    turns: Counter[TurnKey] = Counter()
    groups = fleet.groups
    for _ in range(conversations):
        group = groups[int(rng.integers(len(groups)))]
        prefix: str | None = None
        previous: dict[str, bool] | None = None
        for depth in range(1, policy.length(rng) + 1):
            if depth > 1 and rng.random() < policy.switch_rate:
                group = [g for g in groups if g != group][int(rng.integers(len(groups) - 1))]
            author = _author(fleet, group, rng)
            intent = dyn.draw(author, prefix, depth, previous, rng)
            handoff = "false" if prefix in (None, author) else "true"
            bucket = buckets.bucket(depth)
            turns[TurnKey(author, prefix or NO_PREFIX, bucket, handoff)] += 1
            for rule, ok in intent.items():
                checks[CheckKey(rule, author, prefix or NO_PREFIX, bucket, _verdict(ok))] += 1  # type: ignore[arg-type]
                if previous is not None:
                    key = TransitionKey(rule, author, handoff, _verdict(previous[rule]), _verdict(ok))  # type: ignore[arg-type]
                    transitions[key] += 1
            prefix, previous = author, intent
    return Counts(checks=dict(checks), transitions=dict(transitions), turns=dict(turns))
