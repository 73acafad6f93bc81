"""The live pair recorder's increments sum to exactly what the simulator's ``shadow_counts`` counts
for the same pairs."""

from __future__ import annotations

from collections import Counter

import numpy as np

from handoffmon.counts import POOLED_RULE, ShadowKey
from handoffmon.shadow.recorder import PairRecorder
from handoffmon.shadow.turns import pair_verdicts
from handoffmon.sim.shadow_arm import shadow_counts, simulate_shadowed
from handoffmon.types import CheckResult
from tests.sim.test_shadow_arm import POP


def _feed(recorder: PairRecorder, rows, order: np.ndarray) -> dict[ShadowKey, int]:  # type: ignore[no-untyped-def]
    """One ``add`` per shadow pair (its rules' rows together), in ``order``; the summed increments."""
    total: Counter[ShadowKey] = Counter()
    r = len(rows.rules)
    for pair in order:
        idx = range(pair * r, pair * r + r)
        verdicts = {
            rows.rules[rows.rule[i]]: (bool(rows.y_model[i] == 0), bool(rows.y_prefix[i] == 0))
            for i in idx
            if rows.y_model[i] < 2 and rows.y_prefix[i] < 2
        }
        i0 = pair * r
        total.update(
            recorder.add(
                str(rows.conversation[i0]),
                rows.names[rows.prefix[i0]],
                rows.names[rows.model[i0]],
                bool(rows.handoff[i0]),
                verdicts,
            )
        )
    return dict(total)


def _sum(rec: PairRecorder, convs: tuple[str, ...]) -> Counter[ShadowKey]:
    total: Counter[ShadowKey] = Counter()
    for conv in convs:
        total.update(rec.add(conv, "a", "b", False, {"r": (True, False)}))
    return total


def test_recorder_matches_the_simulators_counts_in_any_order() -> None:
    """Cluster sums are order-free within a conversation, so a shuffled feed gives the same counters."""
    _, rows = simulate_shadowed(POP, 400, rate=0.2, seed=5)
    pairs = len(rows) // len(rows.rules)
    expected = {k: v for k, v in shadow_counts(rows).items() if v}
    for order in (np.arange(pairs), np.random.default_rng(1).permutation(pairs)):
        got = _feed(PairRecorder(), rows, order)
        assert got == expected
    assert any(k.rule == POOLED_RULE and k.stat == "n2" for k in expected)


def test_forgotten_conversations_start_new_clusters() -> None:
    """With room for one cluster, a conversation seen again after another counts as a new cluster."""
    small = _sum(PairRecorder(max_clusters=2), ("c1", "c2", "c1"))  # (rule, pair, conv), (all, pair, conv)
    assert small[ShadowKey("r", "a", "b", "conversations")] == 3
    big = _sum(PairRecorder(), ("c1", "c2", "c1"))
    assert big[ShadowKey("r", "a", "b", "conversations")] == 2
    assert big[ShadowKey("r", "a", "b", "b2")] == 4 + 1  # c1: b=2 → 4, c2: 1


def test_pair_verdicts_orient_the_pair_by_arm() -> None:
    served = (CheckResult("r", "pass"), CheckResult("s", "fail"), CheckResult("t", "not_applicable"))
    shadow = (CheckResult("r", "fail"), CheckResult("s", "fail"), CheckResult("t", "pass"))
    # handoff arm: B served, A shadowed
    assert pair_verdicts("handoff", served, shadow) == {"r": (True, False), "s": (False, False)}
    # no-handoff arm: A served, B shadowed
    assert pair_verdicts("no_handoff", served, shadow) == {"r": (False, True), "s": (False, False)}
