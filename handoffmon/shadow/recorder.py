"""Shadow pairs → ``Counts.shadow`` counters (the paired tables and their conversation-cluster sums)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping

from handoffmon.counts import POOLED_RULE, SHADOW_TABLE, Counts, ShadowKey, shadow_increments

MAX_CLUSTERS = 100_000
"""Bound on the per-(rule, pair, conversation) discordance state kept for the cluster sums."""

Verdicts = Mapping[str, tuple[bool, bool]]
"""Rule → (B passes, A passes) for one pair: B continued A's prefix, and A did."""


class PairRecorder:
    """Counts shadow pairs the way ``sim.shadow_arm.shadow_counts`` does for simulated ones.

    Per (rule, A, B) it keeps the paired 2×2 table and ``handoff_arm``; per (rule, A, B) and
    per (``all``, A, B) the conversation-cluster sums, whose increments need each
    conversation's discordant counts so far. That state is bounded (``max_clusters``,
    least recently used first): a conversation forgotten and seen again starts a new
    cluster, which treats its later pairs as independent of its earlier ones.

    Thread-safe; ``counts`` returns a snapshot.
    """

    def __init__(self, max_clusters: int = MAX_CLUSTERS) -> None:
        self._lock = threading.Lock()
        self._counters: dict[ShadowKey, int] = {}
        self._clusters: OrderedDict[tuple[str, str, str, str], tuple[int, int, int]] = OrderedDict()
        self._max = max_clusters

    def add(
        self, conversation: str, prefix_model: str, model: str, handoff_arm: bool, verdicts: Verdicts
    ) -> int:
        """Record one shadow pair's verdicts (rules pass/fail on both sides); returns the rules counted."""
        if not verdicts or prefix_model == model:
            return 0
        with self._lock:
            for rule, (b_pass, a_pass) in verdicts.items():
                self._cluster(rule, conversation, prefix_model, model, b_pass, a_pass, table=True)
                if handoff_arm:
                    self._bump(ShadowKey(rule, prefix_model, model, "handoff_arm"), 1)
                self._cluster(POOLED_RULE, conversation, prefix_model, model, b_pass, a_pass, table=False)
            return len(verdicts)

    def _cluster(
        self, rule: str, conversation: str, a: str, b: str, b_pass: bool, a_pass: bool, *, table: bool
    ) -> None:
        key = (rule, a, b, conversation)
        bc, cc, n = self._clusters.pop(key, (0, 0, 0))
        for stat, inc in shadow_increments(bc, cc, n, b_pass, a_pass).items():
            if inc and (table or stat not in SHADOW_TABLE):
                self._bump(ShadowKey(rule, a, b, stat), inc)
        state = (bc + int(b_pass and not a_pass), cc + int(a_pass and not b_pass), n + 1)
        self._clusters[key] = state
        while len(self._clusters) > self._max:
            self._clusters.popitem(last=False)

    def _bump(self, key: ShadowKey, inc: int) -> None:
        self._counters[key] = self._counters.get(key, 0) + inc

    def counts(self) -> Counts:
        """The shadow counters so far, as ``Counts`` (merge into the monitor's snapshot)."""
        with self._lock:
            return Counts(shadow=dict(self._counters))
