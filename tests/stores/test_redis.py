"""RedisStore / AsyncRedisStore against a real Redis: batching, TTL; failures raised, guarded, recovered."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handoffmon.config import StoreConfig
from handoffmon.errors import CorruptValue, StoreError, StoreSkipped, StoreTimeout
from handoffmon.protocols import AttributionStore, Authorship, merge_authorship
from handoffmon.stores.guard import GuardedStore
from handoffmon.stores.redis import AsyncRedisStore, RedisStore, encode_authorship
from handoffmon.testing import FakeClock
from tests.conftest import free_port, require_redis
from tests.stores.helpers import silent_server
from tests.stores.redis_server import RedisServer

pytestmark = pytest.mark.integration

A1 = Authorship(("gpt-4o",), 1, 1000.0)
A2 = Authorship(("claude", "gpt-4o"), 2, 1001.5, "conv-7")
COLLISION = Authorship((), 3, 1002.0)


def _cfg(**kw: Any) -> StoreConfig:
    # 1 s: these tests pin behaviour, not fail-open speed, on a possibly busy host
    base: dict[str, Any] = {
        "backend": "redis",
        "key_prefix": f"hm-test:{uuid.uuid4().hex}:",
        "timeout_s": 1.0,
    }
    base.update(kw)
    return StoreConfig(**base)


class CountingConnection(redis.Connection):
    """Counts packed sends: one per network round trip (a pipeline sends once)."""

    sends = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        type(self).sends += 1
        super().send_packed_command(command, check_health)


@pytest.fixture
def store() -> Iterator[RedisStore]:
    require_redis()
    s = RedisStore(_cfg())
    yield s
    s.close()


def test_satisfies_protocol(store: RedisStore) -> None:
    """RedisStore is an AttributionStore."""
    assert isinstance(store, AttributionStore)


def test_round_trip_keeps_order_and_none_for_missing(store: RedisStore) -> None:
    """get_many answers in key order, None where nothing was stored; put overwrites."""
    store.put_many([("k1", A1), ("k2", A2)])
    assert store.get_many(["k2", "missing", "k1"]) == [A2, None, A1]
    store.put_many([("k1", A2), ("k3", COLLISION)])
    assert store.get_many(["k1", "k3"]) == [A2, COLLISION]
    assert store.get_many([]) == []


def test_state_round_trip_and_replace(store: RedisStore) -> None:
    """Conversation state is a JSON mapping; put_state replaces it wholesale."""
    assert store.get_state("c1") is None
    store.put_state("c1", {"last": {"rule": "pass"}, "n": 3})
    assert store.get_state("c1") == {"last": {"rule": "pass"}, "n": 3}
    store.put_state("c1", {"n": 4})
    assert store.get_state("c1") == {"n": 4}


def test_batches_cost_one_round_trip_each() -> None:
    """A 50-key get_many and a 50-item put_many are one network round trip each."""
    require_redis()
    pool = redis.ConnectionPool(host="127.0.0.1", port=6379, connection_class=CountingConnection)
    s = RedisStore(_cfg(), client=redis.Redis(connection_pool=pool))
    items = [(f"k{i}", A1) for i in range(50)]
    s.get_many(["warm"])  # connect (the handshake is not part of a batch)
    CountingConnection.sends = 0
    s.put_many(items)
    assert CountingConnection.sends == 1
    assert s.get_many([k for k, _ in items]) == [A1] * 50
    assert CountingConnection.sends == 2
    s.close()


def test_keys_expire_after_ttl() -> None:
    """Attribution and state keys carry the TTL and are gone after it."""
    require_redis()
    cfg = _cfg(ttl_s=0.3)
    s = RedisStore(cfg)
    s.put_many([("k", A1)])
    s.put_state("c", {"x": 1})
    raw = redis.Redis(host="127.0.0.1", port=6379)
    pttl = raw.pttl(f"{cfg.key_prefix}a:k")
    assert 0 < pttl <= 300
    assert 0 < raw.pttl(f"{cfg.key_prefix}s:c") <= 300
    time.sleep(0.45)
    assert s.get_many(["k"]) == [None]
    assert s.get_state("c") is None
    raw.close()
    s.close()


def test_key_prefix_isolates_tenants() -> None:
    """Two stores with different prefixes on one Redis do not see each other's keys."""
    require_redis()
    a, b = RedisStore(_cfg()), RedisStore(_cfg())
    a.put_many([("same", A1)])
    assert b.get_many(["same"]) == [None]
    a.close()
    b.close()


def test_unreachable_redis_raises_and_the_guard_counts_and_backs_off() -> None:
    """Nothing listening: RedisStore raises StoreError; behind the guard each failure is counted, three
    in a row trip the breaker (later calls are skipped, not attempted), and it probes again later."""
    clock = FakeClock()
    raw = RedisStore(_cfg(url=f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.05))
    with pytest.raises(StoreError, match="Redis get failed"):
        raw.get_many(["a"])
    s = GuardedStore(raw, clock=clock)
    t0 = time.perf_counter()
    with pytest.raises(StoreError):
        s.get_many(["a", "b"])
    with pytest.raises(StoreError):
        s.put_many([("a", A1)])
    assert s.available  # two failures: still trying
    with pytest.raises(StoreError):
        s.get_state("c")  # third failure trips the breaker
    assert not s.available
    with pytest.raises(StoreSkipped):
        s.put_state("c", {"x": 1})  # skipped, not attempted
    with pytest.raises(StoreSkipped):
        s.get_many(["a"])
    assert time.perf_counter() - t0 < 0.3
    stats = s.stats()
    assert (stats["get_errors"], stats["put_errors"], stats["get_state_errors"]) == (1, 1, 1)
    assert stats["put_state_skipped"] == 1 and stats["get_skipped"] == 1
    clock.now += 1.5  # past retry_after_s: the next call probes Redis again (and fails again)
    with pytest.raises(StoreError):
        s.put_many([("a", A1)])
    assert s.stats()["put_errors"] == 2


def test_the_guard_is_unhealthy_from_a_failure_until_a_success_between_probes_too() -> None:
    """``healthy`` (what serve's /readyz reports as ``store``) stays False while Redis is down,
    also between the breaker's probes, when ``available`` is True again (before, /readyz said
    ``ok`` a second after each trip while every call still failed)."""
    clock = FakeClock()
    dead = RedisStore(_cfg(url=f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.05))
    s = GuardedStore(dead, clock=clock)
    assert s.healthy
    for _ in range(3):
        with pytest.raises(StoreError):
            s.get_many(["a"])
    assert not s.available and not s.healthy
    clock.now += 1.5  # the breaker lets the next call probe: still down until one succeeds
    assert s.available and not s.healthy
    with pytest.raises(StoreError):
        s.get_many(["a"])
    assert not s.healthy
    require_redis()
    s.inner = RedisStore(_cfg())  # the backend answers again
    clock.now += 1.5
    assert s.get_many(["a"]) == [None]
    assert s.healthy and s.available
    s.inner.close()


def test_one_failure_does_not_trip_the_breaker() -> None:
    """A single slow call among successes costs one lookup (counted as a timeout), not a pause."""
    require_redis()
    clock = FakeClock()
    inner = RedisStore(_cfg())
    s = GuardedStore(inner, clock=clock)
    s.put_many([("k", A1)])
    real = inner._client

    class Boom:
        def mget(self, keys: Any) -> None:
            raise redis.TimeoutError("slow")

    inner._client = Boom()  # type: ignore[assignment]
    with pytest.raises(StoreTimeout):
        s.get_many(["k"])
    inner._client = real
    assert s.available
    assert s.get_many(["k"]) == [A1]
    assert s.stats()["get_timeouts"] == 1 and s.stats()["get_skipped"] == 0
    s.close()


def test_corrupt_values_read_as_missing_and_are_counted() -> None:
    """Garbage under the store's keys: RedisStore raises CorruptValue with the readable part; the
    guard returns that part (None for the bad key) and counts kind=corrupt without backing off."""
    require_redis()
    cfg = _cfg()
    inner = RedisStore(cfg)
    inner.put_many([("good", A1)])
    raw = redis.Redis(host="127.0.0.1", port=6379)
    raw.set(f"{cfg.key_prefix}a:bad", b"\xff not json")
    raw.set(f"{cfg.key_prefix}s:conv", b"[1, 2]")
    with pytest.raises(CorruptValue) as err:
        inner.get_many(["good", "bad"])
    assert err.value.partial == [A1, None]
    s = GuardedStore(inner)
    assert s.get_many(["good", "bad", "missing"]) == [A1, None, None]
    assert s.get_state("conv") is None
    assert (s.stats()["get_corrupt"], s.stats()["get_state_corrupt"]) == (1, 1) and s.available
    raw.delete(f"{cfg.key_prefix}a:bad", f"{cfg.key_prefix}a:good", f"{cfg.key_prefix}s:conv")
    raw.close()
    s.close()


def test_hung_redis_costs_at_most_trip_after_timeouts() -> None:
    """A Redis that never replies: each call times out after store.timeout_s; after 3, no waiting at all."""
    with silent_server() as port:
        _hung_redis_backs_off(port)


def _hung_redis_backs_off(port: int) -> None:
    s = GuardedStore(RedisStore(_cfg(url=f"redis://127.0.0.1:{port}/0", timeout_s=0.05)))
    for _ in range(3):
        t0 = time.perf_counter()
        with pytest.raises(StoreTimeout):
            s.get_many(["a"])
        assert 0.04 <= time.perf_counter() - t0 < 0.5
    t0 = time.perf_counter()
    with pytest.raises(StoreSkipped):
        s.get_many(["a"])  # breaker open: no wait
    assert time.perf_counter() - t0 < 0.01
    assert s.stats()["get_timeouts"] == 3 and s.stats()["get_skipped"] == 1


def test_a_redis_still_down_after_the_pause_costs_one_wait_not_three() -> None:
    """After the breaker opened, the probe that follows the pause failed and the guard went on
    trying: three more timeouts per pause against a Redis that stays hung (150 ms of every
    1.15 s at the default store.timeout_s, SQLite's 5 s busy wait three times over). A failed
    probe now opens it again at once; a success still closes it."""
    clock = FakeClock()
    with silent_server() as port:
        s = GuardedStore(RedisStore(_cfg(url=f"redis://127.0.0.1:{port}/0", timeout_s=0.05)), clock=clock)
        for _ in range(3):
            with pytest.raises(StoreTimeout):
                s.get_many(["a"])
        for _ in range(2):  # two pauses, one probe each
            clock.now += 1.5
            with pytest.raises(StoreTimeout):
                s.put_many([("a", A1)])  # the probe
            t0 = time.perf_counter()
            with pytest.raises(StoreSkipped):
                s.get_many(["a"])  # open again at once: no wait
            assert time.perf_counter() - t0 < 0.01
        stats = s.stats()
        assert (stats["get_timeouts"], stats["put_timeouts"], stats["get_skipped"]) == (3, 2, 2), stats
    require_redis()
    s.inner = RedisStore(_cfg())
    clock.now += 1.5
    s.put_many([("a", A1)])  # a successful probe (a write: writes had failed) closes it
    assert s.healthy and s.get_many(["a"]) == [A1]
    with pytest.raises(StoreError):  # and the next failure is one of trip_after again
        s.inner = RedisStore(_cfg(url=f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.05))
        s.get_many(["a"])
    assert s.available


def test_recovers_when_redis_comes_back() -> None:
    """Stop a private redis-server mid-use, then restart it: the store resumes by itself."""
    clock = FakeClock()
    with RedisServer() as server:
        s = GuardedStore(RedisStore(_cfg(url=server.url)), clock=clock)
        s.put_many([("k", A1)])
        assert s.get_many(["k"]) == [A1]
        server.stop()
        with pytest.raises(StoreError):
            s.get_many(["k"])
        assert s.stats()["get_errors"] == 1
        server.start()
        clock.now += 1.5
        s.put_many([("k", A2)])
        assert s.get_many(["k"]) == [A2]
        assert s.available
        s.close()


def test_a_redis_out_of_memory_refuses_writes_trips_the_breaker_and_recovers() -> None:
    """A Redis past ``maxmemory`` with ``noeviction`` (a private server) answers reads and
    refuses every write with OOM. Each refused write is counted (``put`` errors; the merge
    script as ``get``, the op it is counted under), the reads in between do not reset the
    breaker, so three refused writes pause the store (``skipped``) instead of trying every
    write; once memory is freed, the first call after the pause writes again and the store is
    healthy."""
    clock = FakeClock()
    with RedisServer(args=["--maxmemory-policy", "noeviction"]) as server:
        raw = redis.Redis.from_url(server.url)
        s = GuardedStore(RedisStore(_cfg(url=server.url)), clock=clock)
        s.put_many([("k", A1)])
        # full: a limit below what it holds (filling up to a limit leaves it just under it as
        # soon as the refused command's buffer is freed, so a small write may pass again)
        raw.config_set("maxmemory", 1)
        with pytest.raises(redis.ResponseError, match="maxmemory"):
            raw.set("probe", b"x")
        with pytest.raises(StoreError, match="maxmemory"):
            s.put_many([("k2", A2)])
        assert s.get_many(["k"]) == [A1]  # reads still answer...
        with pytest.raises(StoreError, match="maxmemory"):
            s.merge_many([("k3", A2)], merge_authorship)
        assert s.get_many(["k"]) == [A1]  # ...and do not reset the row of failed writes
        with pytest.raises(StoreError, match="maxmemory"):
            s.put_state("c", {"x": 1})
        assert not s.available and not s.healthy
        with pytest.raises(StoreSkipped):
            s.put_many([("k2", A2)])
        stats = s.stats()
        assert (stats["put_errors"], stats["get_errors"], stats["put_state_errors"]) == (1, 1, 1)
        assert stats["put_skipped"] == 1
        raw.config_set("maxmemory", 0)  # memory freed (a bigger limit, keys expired)
        clock.now += 1.5
        s.put_many([("k2", A2)])
        assert s.get_many(["k", "k2"]) == [A1, A2] and s.healthy and s.available
        raw.close()
        s.close()


def test_threads_share_one_store(store: RedisStore) -> None:
    """Eight threads writing and reading distinct keys all see their own values."""
    errors: list[str] = []

    def work(t: int) -> None:
        for i in range(20):
            key = f"t{t}-{i}"
            value = Authorship((f"m{t}",), i + 1, float(i))
            store.put_many([(key, value)])
            if store.get_many([key]) != [value]:
                errors.append(key)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []


async def test_async_store_round_trip_and_shares_keys_with_sync() -> None:
    """AsyncRedisStore reads what RedisStore wrote (same layout) and vice versa."""
    require_redis()
    cfg = _cfg()
    sync, asy = RedisStore(cfg), AsyncRedisStore(cfg)
    sync.put_many([("k1", A1)])
    await asy.put_many([("k2", A2)])
    assert await asy.get_many(["k1", "k2", "nope"]) == [A1, A2, None]
    assert sync.get_many(["k2"]) == [A2]
    await asy.put_state("c", {"v": [1, 2]})
    assert sync.get_state("c") == {"v": [1, 2]}
    assert await asy.get_state("c") == {"v": [1, 2]}
    await asy.close()
    sync.close()


async def test_async_store_raises_store_errors() -> None:
    """AsyncRedisStore with no server raises StoreError, like the sync store (callers fail open)."""
    asy = AsyncRedisStore(_cfg(url=f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.05))
    with pytest.raises(StoreError):
        await asy.get_many(["a"])
    with pytest.raises(StoreError):
        await asy.put_many([("a", A1)])
    await asy.close()


# -- merge_many: the atomic merge script -------------------------------------------------

NAMES = ("gpt-4o", "claude/3", "ünïcode-模型", 'quo"te', "back\\slash", "tab\tnl\n")
CONVS = ("", "conv-1", "c/2", "ç", 'x"y')


def _authorship(draw: Any) -> Authorship:
    authors = tuple(draw(st.lists(st.sampled_from(NAMES), min_size=0, max_size=3)))
    return Authorship(
        authors,
        draw(st.integers(min_value=0, max_value=4)),
        draw(st.floats(min_value=0, max_value=4e9, allow_nan=False)),
        draw(st.sampled_from(CONVS)),
    )


@st.composite
def _batches(draw: Any) -> list[list[tuple[str, Authorship]]]:
    keys = st.lists(st.sampled_from([f"k{i}" for i in range(6)]), min_size=1, max_size=4)
    return [[(k, _authorship(draw)) for k in draw(keys)] for _ in range(draw(st.integers(1, 8)))]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=_batches())
def test_merge_script_matches_merge_authorship(batches: list[list[tuple[str, Authorship]]]) -> None:
    """The script writes what ``merge_authorship`` gives, applied in order (names with quotes,
    escapes and non-ASCII text, collision markers, unknown depths, exact float timestamps)."""
    require_redis()
    s = RedisStore(_cfg())
    want: dict[str, Authorship] = {}
    try:
        for batch in batches:
            s.merge_many(batch, merge_authorship)
            for key, value in batch:
                want[key] = merge_authorship(want.get(key), value)
        keys = sorted(want)
        assert s.get_many(keys) == [want[k] for k in keys]
    finally:
        s._client.delete(*[s._keys.attribution(k) for k in want])
        s.close()


def test_merge_is_one_round_trip_and_refreshes_the_ttl() -> None:
    """A batch of merges costs one round trip, and every merged key gets the store's TTL again."""
    require_redis()
    cfg = _cfg(ttl_s=60)
    pool = redis.ConnectionPool(host="127.0.0.1", port=6379, connection_class=CountingConnection)
    s = RedisStore(cfg, client=redis.Redis(connection_pool=pool))
    s.put_many([("a", A1)])
    s._client.pexpire(s._keys.attribution("a"), 1000)
    s._merge(keys=[s._keys.attribution("warm")], args=[1000, 1, encode_authorship(A1)])  # script cached
    before = CountingConnection.sends
    s.merge_many([("a", A1), ("b", A2), ("c", COLLISION)], merge_authorship)
    assert CountingConnection.sends - before == 1
    assert s.get_many(["a", "b", "c"]) == [A1, A2, COLLISION]
    assert all(55_000 < s._client.pttl(s._keys.attribution(k)) <= 60_000 for k in "abc")
    s._client.delete(*[s._keys.attribution(k) for k in ("a", "b", "c", "warm")])
    s.close()


def test_merge_reads_legacy_values_and_overwrites_corrupt_ones() -> None:
    """A three-field value (no conversation id) merges as ``decode_authorship`` reads it; an
    unreadable one is overwritten with the new value and counted by the guard as corrupt."""
    require_redis()
    cfg = _cfg()
    inner = RedisStore(cfg)
    raw = redis.Redis(host="127.0.0.1", port=6379)
    raw.set(f"{cfg.key_prefix}a:legacy", b'[["gpt-4o"],1,1000.0]')
    raw.set(f"{cfg.key_prefix}a:bad", b"\xff not json")
    raw.set(f"{cfg.key_prefix}a:dict", b'[{"a":"b"},1,1000.0,""]')
    s = GuardedStore(inner)
    new = Authorship(("gpt-4o",), 1, 2000.5, "conv-9")
    s.merge_many([("legacy", new), ("bad", A2), ("dict", A1)], merge_authorship)
    assert s.get_many(["legacy", "bad", "dict"]) == [
        merge_authorship(Authorship(("gpt-4o",), 1, 1000.0), new),
        A2,
        A1,
    ]
    assert s.stats()["get_corrupt"] == 1 and s.available
    raw.delete(*[f"{cfg.key_prefix}a:{k}" for k in ("legacy", "bad", "dict")])
    raw.close()
    s.close()


def test_concurrent_merges_from_replicas_never_lose_a_collision() -> None:
    """Replicas recording different authors under the same keys at once: every key ends a
    collision marker (the script is atomic; a read then a write could let one author win)."""
    require_redis()
    cfg = _cfg()
    keys = [f"shared-{i}" for i in range(200)]
    stores = [RedisStore(cfg) for _ in range(4)]
    start = threading.Barrier(len(stores))

    def replica(n: int) -> None:
        start.wait()
        for key in keys:
            stores[n].merge_many([(key, Authorship((f"model-{n}",), 1, float(n), "conv"))], merge_authorship)

    threads = [threading.Thread(target=replica, args=(n,)) for n in range(len(stores))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert all(v is not None and v.authors == () for v in stores[0].get_many(keys))
    stores[0]._client.delete(*[stores[0]._keys.attribution(k) for k in keys])
    for s in stores:
        s.close()


def test_merge_with_another_rule_reads_then_writes() -> None:
    """A merge other than ``merge_authorship`` runs as get_many then put_many (still through the guard)."""
    require_redis()
    s = GuardedStore(RedisStore(_cfg()))
    s.put_many([("a", A1)])
    s.merge_many([("a", A2), ("b", A2)], lambda old, new: old or new)
    assert s.get_many(["a", "b"]) == [A1, A2]
    s.close()


def test_merge_many_get_state_reads_the_state_in_the_same_round_trip() -> None:
    """The merge and the state read are one round trip; the state is read after the keys are
    written; a missing state is None; an unreadable state is counted under get_state, an
    unreadable attribution value under get, and the other half of the answer still returned."""
    require_redis()
    cfg = _cfg()
    pool = redis.ConnectionPool(host="127.0.0.1", port=6379, connection_class=CountingConnection)
    inner = RedisStore(cfg, client=redis.Redis(connection_pool=pool))
    s = GuardedStore(inner)
    s.put_state("conv", {"v": 1, "depth": 3})
    assert s.merge_many_get_state([("warm", A1)], merge_authorship, "none") is None  # script cached
    before = CountingConnection.sends
    assert s.merge_many_get_state([("a", A1), ("b", A2)], merge_authorship, "conv") == {"v": 1, "depth": 3}
    assert CountingConnection.sends - before == 1
    assert s.get_many(["a", "b"]) == [A1, A2]
    raw = redis.Redis(host="127.0.0.1", port=6379)
    raw.set(f"{cfg.key_prefix}s:bad-state", b"[1, 2]")
    assert s.merge_many_get_state([("a", A2)], merge_authorship, "bad-state") is None
    assert s.get_many(["a"]) == [merge_authorship(A1, A2)]  # merged all the same
    assert (s.stats()["get_state_corrupt"], s.stats()["get_corrupt"]) == (1, 0)
    raw.set(f"{cfg.key_prefix}a:garbage", b"\xff")
    assert s.merge_many_get_state([("garbage", A1)], merge_authorship, "conv") == {"v": 1, "depth": 3}
    assert (s.stats()["get_state_corrupt"], s.stats()["get_corrupt"]) == (1, 1)
    assert s.get_many(["garbage"]) == [A1]
    # another merge rule: the two calls
    assert s.merge_many_get_state([("c", A1)], lambda old, new: new, "conv") == {"v": 1, "depth": 3}
    raw.delete(*raw.keys(f"{cfg.key_prefix}*"))
    raw.close()
    s.close()


def test_merge_get_states_is_the_per_turn_calls_in_one_round_trip() -> None:
    """A batch of merges and state reads is one round trip and answers what the calls one by
    one would, in order: a conversation's state as it is before the batch's own writes, None
    for a missing state or a request without a conversation, a state-only read (no keys).
    put_states is one round trip too. After SCRIPT FLUSH (a restarted Redis) the batch loads
    the script and runs again; unreadable values are counted once per batch, the readable
    answers kept. On a private redis-server: SCRIPT FLUSH on the shared one would make the
    store scripts of every test running meanwhile fail."""
    with RedisServer() as server:
        _merge_get_states_round_trips(server.port)


def _merge_get_states_round_trips(port: int) -> None:
    cfg = _cfg(url=f"redis://127.0.0.1:{port}/0")
    pool = redis.ConnectionPool(host="127.0.0.1", port=port, connection_class=CountingConnection)
    s = GuardedStore(RedisStore(cfg, client=redis.Redis(connection_pool=pool)))
    assert s.native_batches
    raw = redis.Redis(host="127.0.0.1", port=port)
    s.merge_many([("warm", A1)], merge_authorship)  # connected, the script cached
    before = CountingConnection.sends
    s.put_states([("c1", {"depth": 1}), ("c2", {"depth": 2})])
    assert CountingConnection.sends - before == 1
    before = CountingConnection.sends
    states = s.merge_get_states(
        [([("a", A1)], "c1"), ([("a", A2), ("b", A2)], "c2"), ((), "c1"), ([("c", A1)], None), ((), "c3")],
        merge_authorship,
    )
    assert CountingConnection.sends - before == 1
    assert states == [{"depth": 1}, {"depth": 2}, {"depth": 1}, None, None]
    # the second request merged over the first: as two merge_many calls in that order
    assert s.get_many(["a", "b", "c"]) == [merge_authorship(A1, A2), A2, A1]
    raw.script_flush()
    assert s.merge_get_states([([("d", A1)], "c2")], merge_authorship) == [{"depth": 2}]
    assert s.get_many(["d"]) == [A1]
    raw.set(f"{cfg.key_prefix}s:bad", b"[1, 2]")
    raw.set(f"{cfg.key_prefix}a:garbage", b"\xff")
    states = s.merge_get_states(
        [([("e", A1)], "bad"), ([("garbage", A2)], "c1"), ((), "c2")], merge_authorship
    )
    assert states == [None, {"depth": 1}, {"depth": 2}]
    assert s.get_many(["e", "garbage"]) == [A1, A2]
    assert s.stats()["get_state_corrupt"] == 1  # one batch, both kinds: the state's is the one counted
    assert s.merge_get_states([([("garbage2", A1)], "c1")], merge_authorship) == [{"depth": 1}]
    raw.set(f"{cfg.key_prefix}a:garbage2", b"\xff")
    assert s.merge_get_states([([("garbage2", A1)], "c1")], merge_authorship) == [{"depth": 1}]
    assert s.stats()["get_corrupt"] == 1
    assert s.merge_get_states([], merge_authorship) == []
    # another merge rule: each request's read and write, then its state, in order
    assert s.merge_get_states([([("f", A1)], "c2"), ([("f", A2)], None)], lambda old, new: new) == [
        {"depth": 2},
        None,
    ]
    assert s.get_many(["f"]) == [A2]
    raw.delete(*raw.keys(f"{cfg.key_prefix}*"))
    raw.close()
    s.close()


def test_merge_get_states_fails_as_a_whole_and_the_guard_counts_it_once() -> None:
    """Redis unreachable: the batch raises StoreError (nothing assumed written), counted once."""
    s = GuardedStore(RedisStore(_cfg(url=f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2)))
    with pytest.raises(StoreError):
        s.merge_get_states([([("a", A1)], "c1"), ([("b", A2)], "c2")], merge_authorship)
    with pytest.raises(StoreError):
        s.put_states([("c1", {"depth": 1}), ("c2", {"depth": 2})])
    stats = s.stats()
    assert (stats["get_errors"], stats["put_state_errors"]) == (1, 1)
    s.close()


def test_merge_with_another_rule_overwrites_unreadable_values_and_says_so() -> None:
    """With a merge other than ``merge_authorship`` (read, then write), an unreadable stored value
    is merged as absent and written all the same; the store raises CorruptValue, the guard counts it."""
    require_redis()
    cfg = _cfg()
    raw = redis.Redis(host="127.0.0.1", port=6379)
    raw.set(f"{cfg.key_prefix}a:bad", b"\xff not json")
    inner = RedisStore(cfg)
    keep_old = lambda old, new: old or new  # noqa: E731
    with pytest.raises(CorruptValue):
        inner.merge_many([("bad", A1)], keep_old)
    assert inner.get_many(["bad"]) == [A1]
    raw.set(f"{cfg.key_prefix}a:bad", b"\xff not json")
    s = GuardedStore(inner)
    s.merge_many([("bad", A2), ("fresh", A1)], keep_old)
    assert s.get_many(["bad", "fresh"]) == [A2, A1]
    assert s.stats()["get_corrupt"] == 1 and s.available
    raw.delete(*raw.keys(f"{cfg.key_prefix}*"))
    raw.close()
    s.close()


# -- AsyncRedisStore: the same merge ---------------------------------------------------------


class CountingAsyncConnection(aredis.Connection):
    """``CountingConnection`` for ``redis.asyncio``: one count per round trip."""

    sends = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        type(self).sends += 1
        await super().send_packed_command(command, check_health)


async def test_async_merge_is_the_sync_merge_in_one_round_trip() -> None:
    """AsyncRedisStore.merge_many writes what ``merge_authorship`` gives (collision markers,
    unknown depths) in one round trip, and the sync store reads it; merge_many_get_state
    returns the state in the same round trip, read after the keys are written."""
    require_redis()
    cfg = _cfg()
    pool = aredis.ConnectionPool(host="127.0.0.1", port=6379, connection_class=CountingAsyncConnection)
    asy, sync = AsyncRedisStore(cfg, client=aredis.Redis(connection_pool=pool)), RedisStore(cfg)
    try:
        await asy.merge_many([("warm", A1)], merge_authorship)  # script loaded
        sync.put_many([("a", A1)])
        sync.put_state("conv", {"depth": 2})
        other = Authorship(("claude",), 1, 1003.0, "conv-7")
        before = CountingAsyncConnection.sends
        await asy.merge_many([("a", other), ("b", A2), ("c", A1)], merge_authorship)
        assert CountingAsyncConnection.sends - before == 1
        want = [merge_authorship(A1, other), A2, A1]
        assert want[0] is not None and want[0].authors == ()  # a collision marker
        assert sync.get_many(["a", "b", "c"]) == want
        before = CountingAsyncConnection.sends
        state = await asy.merge_many_get_state([("c", A2)], merge_authorship, "conv")
        assert (state, CountingAsyncConnection.sends - before) == ({"depth": 2}, 1)
        assert sync.get_many(["c"]) == [merge_authorship(A1, A2)]
        assert await asy.merge_many_get_state([("d", A1)], merge_authorship, "none") is None
        # another merge rule: a read, then a write
        keep_old = lambda old, new: old or new  # noqa: E731
        assert await asy.merge_many_get_state([("e", A1)], keep_old, "conv") == {"depth": 2}
        await asy.merge_many([("e", A2)], keep_old)
        assert await asy.get_many(["e"]) == [A1]
        assert await asy.ping()
    finally:
        sync._client.delete(*sync._client.keys(f"{cfg.key_prefix}*"))
        await asy.close()
        sync.close()


async def test_async_merge_overwrites_unreadable_values_and_says_so() -> None:
    """Unreadable stored values are overwritten with the new ones and reported (CorruptValue),
    by the script and by the read-then-write path; an unreadable state is reported as a
    get_state failure."""
    require_redis()
    cfg = _cfg()
    raw = redis.Redis(host="127.0.0.1", port=6379)
    asy = AsyncRedisStore(cfg)
    try:
        raw.set(f"{cfg.key_prefix}a:bad", b"\xff not json")
        with pytest.raises(CorruptValue):
            await asy.merge_many([("bad", A1), ("fresh", A2)], merge_authorship)
        assert await asy.get_many(["bad", "fresh"]) == [A1, A2]
        raw.set(f"{cfg.key_prefix}a:bad", b"\xff not json")
        with pytest.raises(CorruptValue):
            await asy.merge_many([("bad", A2)], lambda old, new: old or new)
        assert await asy.get_many(["bad"]) == [A2]
        raw.set(f"{cfg.key_prefix}s:broken", b"[1, 2]")
        with pytest.raises(CorruptValue) as info:
            await asy.merge_many_get_state([("x", A1)], merge_authorship, "broken")
        assert info.value.op == "get_state"
        assert await asy.get_many(["x"]) == [A1]  # merged all the same
    finally:
        raw.delete(*raw.keys(f"{cfg.key_prefix}*"))
        raw.close()
        await asy.close()


async def test_async_and_sync_writers_never_lose_a_collision() -> None:
    """A sync replica and an async one recording different authors under the same keys at
    once: every key ends a collision marker (both run the same atomic script)."""
    require_redis()
    cfg = _cfg()
    keys = [f"shared-{i}" for i in range(200)]
    sync, asy = RedisStore(cfg), AsyncRedisStore(cfg)
    start = threading.Barrier(2)

    def sync_replica() -> None:
        start.wait()
        for key in keys:
            sync.merge_many([(key, Authorship(("model-sync",), 1, 1.0, "conv"))], merge_authorship)

    th = threading.Thread(target=sync_replica)
    th.start()
    start.wait()
    try:
        for key in keys:
            await asy.merge_many([(key, Authorship(("model-async",), 1, 2.0, "conv"))], merge_authorship)
    finally:
        th.join()
    try:
        assert all(v is not None and v.authors == () for v in sync.get_many(keys))
    finally:
        sync._client.delete(*[sync._keys.attribution(k) for k in keys])
        await asy.close()
        sync.close()


async def test_async_ping_is_false_without_a_server() -> None:
    """ping() answers False (never raises) when Redis is unreachable."""
    asy = AsyncRedisStore(_cfg(url=f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.05))
    assert await asy.ping() is False
    await asy.close()


def test_conversation_ids_with_colons_or_nul_get_plain_key_names(store: RedisStore) -> None:
    """A caller id with ``:`` or NUL is stored under a hashed key name (no ``:`` or NUL after
    the prefix's ``s#``), still its own state; other ids keep their readable key."""
    ids = ["a:b:s:x", "a:0xdeadbeef", "nul\x00id", "plain-id"]
    for i, cid in enumerate(ids):
        store.put_state(cid, {"n": i})
    assert [store.get_state(cid) for cid in ids] == [{"n": i} for i in range(len(ids))]
    prefix = store._keys.prefix.encode()
    names = sorted(k[len(prefix) :] for k in store._client.scan_iter(match=prefix + b"*", count=1000))
    assert names[-1] == b"s:plain-id"
    assert len(names) == 4 and all(n.startswith(b"s#") and len(n) == 34 for n in names[:3])
    assert store.get_state("a%3Ab:s:x") is None and store.get_state("a") is None


def test_values_keep_non_ascii_ids_as_utf8(store: RedisStore) -> None:
    """Attribution values and states hold a non-ASCII conversation id as UTF-8 (no ``\\u``
    escapes: a 4-byte character took 12); an id with a lone surrogate still round trips."""
    cid = "ü🙂" * 85
    value = Authorship(("gpt-4o",), 3, 1000.5, cid)
    store.put_many([("c:0x1", value)])
    store.put_state(cid, {"rev": 1, "name": cid})
    raw = store._client.get(store._keys.attribution("c:0x1"))
    assert raw is not None and len(raw) < len(cid.encode()) + 40 and b"\\u" not in raw
    assert store.get_many(["c:0x1"]) == [value] and store.get_state(cid) == {"rev": 1, "name": cid}
    odd = Authorship(("gpt-4o",), 1, 1.0, "x\ud800y")
    store.merge_many([("c:0x2", odd)], merge_authorship)
    store.merge_many([("c:0x1", value)], merge_authorship)
    assert store.get_many(["c:0x2", "c:0x1"]) == [odd, value]


HUGE = 500_000
"""Keys of a hostile history (a 10 MiB body holds ~300,000 messages; wrap() has no limit)."""


def test_a_huge_history_is_looked_up_in_chunks_without_a_timeout() -> None:
    """One MGET of 500,000 keys at the default store.timeout_s (0.05 s) held the attribution
    thread 11-15 s, then failed as a StoreTimeout (failing every turn batched with it); MGETs
    of MGET_CHUNK keys one after the other answer in order in about 1-1.6 s, each inside the
    timeout, sync and async alike."""
    import asyncio

    from handoffmon.stores.redis import MGET_CHUNK

    require_redis()
    # 0.5 s, not the default 0.05 s: one chunk answers in ~3 ms, but a CI host running the
    # suite on every core can stall one past 50 ms; the unchunked MGET still takes 10 s or more
    cfg = _cfg(timeout_s=0.5)
    keys = [f"c:0x{i:016x}" for i in range(HUGE)]
    store = RedisStore(cfg)
    for _ in range(20):  # connect first: on a loaded host the handshake alone may take 50 ms
        with contextlib.suppress(StoreError):
            store.put_many([(keys[0], A1), (keys[MGET_CHUNK], A2), (keys[-1], A1)])
            break
    got = store.get_many(keys)
    assert len(got) == HUGE and (got[0], got[MGET_CHUNK], got[-1]) == (A1, A2, A1)
    assert sum(a is not None for a in got) == 3

    async def async_lookup() -> list[Authorship | None]:
        astore = AsyncRedisStore(_cfg(key_prefix=cfg.key_prefix))  # chunking, not the timeout
        try:
            return await astore.get_many(keys)
        finally:
            await astore.close()

    assert asyncio.run(async_lookup()) == got
    redis.Redis(host="127.0.0.1", port=6379).delete(
        *(f"{cfg.key_prefix}a:{k}" for k in (keys[0], keys[MGET_CHUNK], keys[-1]))
    )
    store.close()


def test_a_batch_of_turns_in_one_round_trip_is_one_operation(store: RedisStore) -> None:
    """``handoffmon_store_operations_total`` counts round trips, the unit failures are counted
    in: 64 queued turns' merges and state reads in one ``merge_get_states`` are one ``get`` and
    one ``get_state``, their states written back in one ``put_states`` one ``put_state``. On a
    Redis that is down the same batch is one failed ``get`` of one: the failure ratio is 1, not
    1/64 as when counted against turns."""
    turns = [([(f"k{i}", A1)], f"c{i}") for i in range(64)]
    guard = GuardedStore(store)
    assert guard.merge_get_states(turns, merge_authorship) == [None] * 64
    guard.put_states([(f"c{i}", {"depth": 1}) for i in range(64)])
    assert guard.operations() == {"get": 1, "put": 0, "get_state": 1, "put_state": 1}
    down = GuardedStore(RedisStore(_cfg(url=f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.05)))
    with pytest.raises(StoreError):
        down.merge_get_states(turns, merge_authorship)
    with pytest.raises(StoreError):
        down.put_states([(f"c{i}", {"depth": 1}) for i in range(64)])
    stats, operations = down.stats(), down.operations()
    assert (stats["get_errors"], operations["get"]) == (1, 1)
    assert (stats["put_state_errors"], operations["put_state"]) == (1, 1)
    down.close()
