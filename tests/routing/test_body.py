"""``serve``'s body rewriter: what it keeps of the bodies it reads stays bounded in bytes."""

from __future__ import annotations

import json
from typing import Any

from handoffmon.config import RoutingConfig
from handoffmon.routing import RoutingState
from handoffmon.routing.body import MAX_CACHED_NAME, BodyRouting


def test_long_group_names_in_a_body_are_not_cached() -> None:
    """A client names the groups of its body's ``fallbacks``: names longer than MAX_CACHED_NAME
    are mapped for this request and not kept (the cache held up to 1,024 of any length)."""
    state = RoutingState(RoutingConfig(enabled=True, mode="enforce"))
    lookup: Any = None  # no table: the decision never reaches the prefix lookup
    rewriter = BodyRouting(state, lookup, str)
    for i in range(5):
        body = {"model": "g-p", "messages": [], "fallbacks": [f"{'x' * 100_000}{i}", "g-b"]}
        assert rewriter.rewrite(json.dumps(body).encode()) is None
    assert state.counts.snapshot()[("enforce", "no_table")] == 5
    assert rewriter._cands and all(len(g) <= MAX_CACHED_NAME for g in rewriter._cands)
