"""Two monitors ("replicas") sharing one Redis: attribution and conversation state cross replicas."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any, ClassVar

import pytest
import redis

from handoffmon.counts import TransitionKey
from handoffmon.pipeline.monitor import Monitor
from handoffmon.stores.redis import RedisStore
from tests.conftest import require_redis
from tests.pipeline.helpers import RecordingExporter, make_config, run_conversation, turn

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


class NamingConnection(redis.Connection):
    """Records the name of every command sent (one command = one round trip, no pipelines here)."""

    names: ClassVar[list[str]] = []

    def send_command(self, *args: Any, **kwargs: Any) -> None:
        type(self).names.append(str(args[0]).upper())
        super().send_command(*args, **kwargs)


def test_a_turn_costs_three_redis_round_trips() -> None:
    """Per turn on a Redis store: an MGET of the history's keys (from the second turn), one
    EVALSHA that writes the reply's keys and reads the conversation's state, one SET of the
    state; no separate GET, and state still carries across the turns (transitions counted)."""
    require_redis()
    cfg = make_config(store={"backend": "redis", "key_prefix": f"hm-test-{uuid.uuid4().hex}:"})
    pool = redis.ConnectionPool(host="127.0.0.1", port=6379, connection_class=NamingConnection)
    client = redis.Redis(connection_pool=pool)
    m = Monitor(cfg, exporters=[RecordingExporter()], store=RedisStore(cfg.store, client=client))
    run_conversation(m, ["warm"], user="warm-up")  # loads the script
    assert m.flush(10)
    NamingConnection.names.clear()
    for i in range(3):
        history: list[dict[str, Any]] = [{"role": "user", "content": f"conversation {i}"}]
        for j, author in enumerate(("m1", "m2", "m1", "m2")):
            turn(m, history, f"reply {j} of {i}", author)
            assert m.flush(10)  # persisted before the next request, as real users are slower
            history += [
                {"role": "assistant", "content": f"reply {j} of {i}"},
                {"role": "user", "content": "more"},
            ]
    names = Counter(NamingConnection.names)
    m.close()
    client.delete(*client.keys(f"{cfg.store.key_prefix}*"))
    client.close()
    assert names == Counter({"EVALSHA": 12, "SET": 12, "MGET": 9})
    transitions = m.snapshot().transitions
    assert sum(transitions.values()) == 9  # 3 per conversation: the state was read back each turn
