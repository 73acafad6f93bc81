"""Two monitors ("replicas") sharing one Redis: attribution and conversation state cross replicas."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
import redis

from handoffmon.counts import TransitionKey
from handoffmon.pipeline.aggregates import Aggregates
from handoffmon.pipeline.monitor import Monitor
from handoffmon.stores.redis import RedisStore
from handoffmon.stores.sqlite import SQLiteStore
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
    EVALSHA that writes the reply's keys and reads the conversation's state, one EVALSHA that
    writes the state compare-and-set; no separate GET, and state still carries across the
    turns (transitions counted)."""
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
    assert names == Counter({"EVALSHA": 24, "MGET": 9})
    transitions = m.snapshot().transitions
    assert sum(transitions.values()) == 9  # 3 per conversation: the state was read back each turn


class _RacingRedis(RedisStore):
    """Reads of the conversation's state wait, while ``racing``, until both replicas have read:
    both fold the same turn on the same state, then both write it."""

    def __init__(self, config: Any, barrier: threading.Barrier, racing: threading.Event) -> None:
        super().__init__(config)
        self._barrier, self._racing = barrier, racing

    def merge_many_get_state(self, *args: Any) -> Any:
        state = super().merge_many_get_state(*args)
        if self._racing.is_set():
            self._barrier.wait()
        return state

    def merge_get_states(self, *args: Any) -> Any:
        states = super().merge_get_states(*args)
        if self._racing.is_set():
            self._barrier.wait()
        return states


class _RacingSQLite(SQLiteStore):
    """As ``_RacingRedis``, on one SQLite file shared by two stores (two processes' connections)."""

    def __init__(self, path: Path, barrier: threading.Barrier, racing: threading.Event) -> None:
        super().__init__(path)
        self._barrier, self._racing = barrier, racing

    def get_state(self, conversation_id: str) -> Any:
        state = super().get_state(conversation_id)
        if self._racing.is_set():
            self._barrier.wait()
        return state


RACE_AUTHORS = ("m1", "m2", "m1", "m2", "m1", "m2")
RACE_REPLIES = ("ok", "a reply that is much too long", "fine", "yes", "far too many words in this one", "ok")


def _race(replicas: Sequence[Monitor], racing: threading.Event | None) -> None:
    """One conversation; its third turn sent twice (a client retry): at once to two replicas, or
    one after the other to one."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "hello replicas"}]
    for depth, (author, reply) in enumerate(zip(RACE_AUTHORS, RACE_REPLIES, strict=True), start=1):
        senders = [*replicas, *replicas][:2] if depth == 3 else [replicas[depth % len(replicas)]]
        if racing is not None and depth == 3:
            racing.set()
        for replica in senders:
            turn(replica, history, reply, author, headers={"x-conversation-id": "conv-race"})
        for replica in senders:
            assert replica.flush(30)
        if racing is not None:
            racing.clear()
        history += [{"role": "assistant", "content": reply}, {"role": "user", "content": f"next {depth}"}]


def _sums(*replicas: Monitor) -> Counter[Any]:
    out: Counter[Any] = Counter()
    for replica in replicas:
        out.update(replica.snapshot().cell_stats)
    return +out


@pytest.mark.parametrize("backend", ["redis", "sqlite"])
def test_replicas_folding_one_conversation_at_once_count_as_one(backend: str, tmp_path: Path) -> None:
    """The same turn folded by two replicas at once (both read the conversation's state before
    either writes it): the state is written compare-and-set, the loser folds again on the
    winner's state, so Σn², Σyn, Σy² and the conversation counts equal one replica's (the
    audit's e2b_race: conversations 120–126 and n2 1344–1440 where one replica gives 120, 1440)."""
    barrier, racing = threading.Barrier(2, timeout=30), threading.Event()
    if backend == "redis":
        require_redis()
        cfg = make_config(store={"backend": "redis", "key_prefix": f"hm-test-{uuid.uuid4().hex}:"})
        stores: list[Any] = [_RacingRedis(cfg.store, barrier, racing) for _ in range(2)]
        ref_cfg = cfg.store.model_copy(update={"key_prefix": f"{cfg.store.key_prefix}ref:"})
        ref_store: Any = RedisStore(ref_cfg)
    else:
        cfg = make_config(store={"backend": "sqlite", "path": str(tmp_path / "shared.db")})
        stores = [_RacingSQLite(tmp_path / "shared.db", barrier, racing) for _ in range(2)]
        ref_store = SQLiteStore(tmp_path / "reference.db")
    a, b = (Monitor(cfg, store=s, aggregates=Aggregates(None)) for s in stores)
    reference = Monitor(cfg, store=ref_store, aggregates=Aggregates(None))
    try:
        _race([a, b], racing)
        _race([reference], None)
        assert barrier.n_waiting == 0 and not barrier.broken  # both replicas read before either wrote
        expected = _sums(reference)
        assert expected  # the conversation is in refit cells
        assert _sums(a, b) == expected
        conflicts = a.store.stats()["put_state_conflicts"] + b.store.stats()["put_state_conflicts"]
        assert conflicts == 1  # the replica that wrote second folded again, once
        assert sum(a.snapshot().monitor_errors.values()) + sum(b.snapshot().monitor_errors.values()) == 0
    finally:
        for m in (a, b, reference):
            m.close()
        if backend == "redis":
            client = redis.Redis()
            client.delete(*client.keys(f"{cfg.store.key_prefix}*"))
            client.close()
