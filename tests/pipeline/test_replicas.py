"""Two monitors ("replicas") sharing one Redis: attribution and conversation state cross replicas."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from handoffmon.counts import TransitionKey
from handoffmon.pipeline.monitor import Monitor
from tests.conftest import require_redis
from tests.pipeline.helpers import RecordingExporter, make_config, turn

pytestmark = pytest.mark.integration


def test_turns_alternating_between_replicas_share_authorship_and_state() -> None:
    """Turn 1 on replica A, turn 2 on B, turn 3 on A: depths, prefixes and transitions are continuous."""
    require_redis()
    cfg = make_config(store={"backend": "redis", "key_prefix": f"hm-test-{uuid.uuid4().hex}:"})
    exp = RecordingExporter()
    a, b = Monitor(cfg, exporters=[exp]), Monitor(cfg, exporters=[exp])
    history: list[dict[str, Any]] = [{"role": "user", "content": "hello replicas"}]
    for replica, author, reply in ((a, "m1", "ok"), (b, "m2", "ok again"), (a, "m1", "fine")):
        turn(replica, history, reply, author)
        replica.flush(10)  # the reply is persisted to Redis before the next request
        history += [{"role": "assistant", "content": reply}, {"role": "user", "content": "next"}]
    a.close()
    b.close()
    contexts = [r.context for r in exp.results]
    assert [(c.depth, c.prefix_model) for c in contexts] == [(1, "none"), (2, "m1"), (3, "m2")]
    assert len({c.conversation_id for c in contexts[1:]}) == 1
    # B's transition comes from A's verdict at turn 1 and A's from B's at turn 2 (state in Redis)
    transitions = dict(a.snapshot().transitions)
    for k, n in b.snapshot().transitions.items():
        transitions[k] = transitions.get(k, 0) + n
    assert transitions == {
        TransitionKey("short", "m2", "true", "pass", "pass"): 1,
        TransitionKey("short", "m1", "true", "pass", "pass"): 1,
    }
