"""Shadow pairs → ``Counts.shadow`` increments (the paired tables and their conversation-cluster sums)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping

from handoffmon.counts import POOLED_RULE, SHADOW_TABLE, ShadowKey, shadow_increments

MAX_CLUSTERS = 100_000
"""Bound on the per-(rule, pair, conversation) discordance state kept for the cluster sums."""

Verdicts = Mapping[str, tuple[bool, bool]]
"""Rule → (B passes, A passes) for one pair: B continued A's prefix, and A did."""


class PairRecorder:
    """Turns shadow pairs into ``Counts.shadow`` increments, the way ``sim.shadow_arm.shadow_counts``
    counts simulated ones.

    Per (rule, A, B) the paired 2×2 table and ``handoff_arm``; per (rule, A, B) and per
    (``all``, A, B) the conversation-cluster sums, whose increments need each
    conversation's discordant counts so far. That state is bounded (``max_clusters``,
    least recently used first): a conversation forgotten and seen again starts a new
    cluster, which treats its later pairs as independent of its earlier ones.

    The recorder keeps no counters: the increments go where every other count goes
    (``Monitor.count_shadow``: the aggregates, SQLite, Prometheus and OTel). Thread-safe.
    """

    def __init__(self, max_clusters: int = MAX_CLUSTERS) -> None:
        self._lock = threading.Lock()
        self._clusters: OrderedDict[tuple[str, str, str, str], tuple[int, int, int]] = OrderedDict()
        self._max = max_clusters

    def add(
        self, conversation: str, prefix_model: str, model: str, handoff_arm: bool, verdicts: Verdicts
    ) -> dict[ShadowKey, int]:
        """Record one shadow pair's verdicts (rules pass/fail on both sides); returns its counter
        increments (empty: nothing paired)."""
        out: dict[ShadowKey, int] = {}
        if not verdicts or prefix_model == model:
            return out
        with self._lock:
            for rule, (b_pass, a_pass) in verdicts.items():
                self._cluster(out, rule, conversation, prefix_model, model, b_pass, a_pass, table=True)
                if handoff_arm:
                    _bump(out, ShadowKey(rule, prefix_model, model, "handoff_arm"), 1)
                self._cluster(
                    out, POOLED_RULE, conversation, prefix_model, model, b_pass, a_pass, table=False
                )
        return out

    def _cluster(
        self,
        out: dict[ShadowKey, int],
        rule: str,
        conversation: str,
        a: str,
        b: str,
        b_pass: bool,
        a_pass: bool,
        *,
        table: bool,
    ) -> None:
        key = (rule, a, b, conversation)
        bc, cc, n = self._clusters.pop(key, (0, 0, 0))
        for stat, inc in shadow_increments(bc, cc, n, b_pass, a_pass).items():
            if inc and (table or stat not in SHADOW_TABLE):
                _bump(out, ShadowKey(rule, a, b, stat), inc)
        state = (bc + int(b_pass and not a_pass), cc + int(a_pass and not b_pass), n + 1)
        self._clusters[key] = state
        while len(self._clusters) > self._max:
            self._clusters.popitem(last=False)


def _bump(out: dict[ShadowKey, int], key: ShadowKey, inc: int) -> None:
    out[key] = out.get(key, 0) + inc
