"""The AttributionStore contract, run against every backend built by ``make_store`` (memory, SQLite, Redis).

Backend-specific behaviour (LRU eviction, SQLite purging) is tested in each backend's own
module; this module pins what the attributor and the pipeline rely on from any store —
including how it fails: down, timed out, holding a corrupt value — and that the store guard
counts those failures the same way whatever the backend.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from handoffmon.config import StoreConfig
from handoffmon.errors import CorruptValue, StoreError, StoreTimeout
from handoffmon.protocols import AttributionStore, Authorship
from handoffmon.stores import GuardedStore, make_store
from handoffmon.stores.redis import RedisStore
from handoffmon.stores.sqlite import SQLiteStore
from tests.conftest import free_port, require_redis
from tests.stores.helpers import run_in_threads, silent_server

BACKENDS = ["memory", "sqlite", "redis"]

A1 = Authorship(("model-a",), 1, 1_700_000_000.25, "conv-1")
A2 = Authorship(("model-b", "model-a"), 2, 1_700_000_001.5, "conv-1")
MARKER = Authorship((), 3, 1_700_000_002.0)  # collision marker: attributes nothing


def _build(backend: str, tmp_path: Path, ttl_s: float = 3600.0) -> AttributionStore:
    if backend == "redis":
        require_redis()
    cfg = StoreConfig(
        backend=backend,  # type: ignore[arg-type]
        path=str(tmp_path / "store.db"),
        key_prefix=f"hm-contract:{uuid.uuid4().hex}:",
        ttl_s=ttl_s,
        timeout_s=1.0,  # the contract, not fail-open (tested in test_redis), on a possibly busy host
    )
    return make_store(cfg)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AttributionStore]:
    s = _build(request.param, tmp_path)
    yield s
    s.close()


def test_is_an_attribution_store(store: AttributionStore) -> None:
    """Every backend satisfies the runtime-checkable protocol."""
    assert isinstance(store, AttributionStore)


def test_get_many_answers_in_key_order_with_none_for_missing(store: AttributionStore) -> None:
    """One answer per key, in the order asked, None where nothing was stored; [] for []."""
    store.put_many([("k1", A1), ("k2", A2)])
    assert store.get_many(["k2", "nope", "k1", "k2"]) == [A2, None, A1, A2]
    assert store.get_many([]) == []


def test_every_authorship_field_round_trips(store: AttributionStore) -> None:
    """Several authors in order, depth, float created_at, conversation id and the empty marker."""
    store.put_many([("a", A2), ("m", MARKER)])
    got = store.get_many(["a", "m"])
    assert got == [A2, MARKER]
    assert got[0] is not None and got[0].authors == ("model-b", "model-a")


def test_put_overwrites(store: AttributionStore) -> None:
    """A second put of the same key replaces the value."""
    store.put_many([("k", A1)])
    store.put_many([("k", A2)])
    assert store.get_many(["k"]) == [A2]


def test_unusual_keys(store: AttributionStore) -> None:
    """Keys with separators, unicode and 200 characters are distinct and exact."""
    keys = ["a:b:c", "é-ключ-鍵", "x" * 200, "a:b"]
    store.put_many([(k, Authorship((f"m{i}",), i + 1, 1.0)) for i, k in enumerate(keys)])
    assert [a.authors[0] if a else None for a in store.get_many(keys)] == ["m0", "m1", "m2", "m3"]


def test_state_round_trip_replace_and_isolation(store: AttributionStore) -> None:
    """State: None until written, nested JSON round-trips, put replaces, caller mutations don't leak."""
    assert store.get_state("c1") is None
    state: dict[str, object] = {"last": {"fmt": "pass", "len": "fail"}, "rules": ["a", "b"], "n": 3}
    store.put_state("c1", state)
    state["n"] = 99  # the store kept its own copy
    assert store.get_state("c1") == {"last": {"fmt": "pass", "len": "fail"}, "rules": ["a", "b"], "n": 3}
    store.put_state("c1", {"n": 4})
    assert store.get_state("c1") == {"n": 4}
    assert store.get_state("c2") is None


def test_state_and_fingerprints_do_not_collide(store: AttributionStore) -> None:
    """A conversation id equal to a fingerprint key is a different entry."""
    store.put_many([("same", A1)])
    store.put_state("same", {"x": 1})
    assert store.get_many(["same"]) == [A1]
    assert store.get_state("same") == {"x": 1}


HOSTILE_IDS = ["a\ud800b", "a\udfffb", "\udcff" * 64, "nul\x00id", "x:y\x00\ud800", "é" * 120, ""]
"""Conversation ids a caller can send: lone surrogates (JSON ``"\\ud800"``), NUL, colons, long
non-ASCII text, empty."""


def test_hostile_conversation_ids_round_trip_apart_without_a_failure(store: AttributionStore) -> None:
    """Every call of a conversation whose id held a lone surrogate raised ``UnicodeEncodeError``
    in SQLite and Redis (three in a row paused the store for every conversation); now each id
    keeps its own attributions and state, distinct from every other, and the guard counts
    nothing."""
    guard = GuardedStore(store)
    for i, cid in enumerate(HOSTILE_IDS):
        guard.put_many([(f"k{i}", Authorship((f"m{i}",), i + 1, 1.0, cid))])
        guard.put_state(cid, {"i": i, "text": cid})
    got = guard.get_many([f"k{i}" for i in range(len(HOSTILE_IDS))])
    assert [a.conversation_id if a else None for a in got] == HOSTILE_IDS
    assert [guard.get_state(cid) for cid in HOSTILE_IDS] == [
        {"i": i, "text": cid} for i, cid in enumerate(HOSTILE_IDS)
    ]
    if guard.native_cas:  # the shared stores' compare-and-set (the memory store has none)
        assert guard.put_states_if([(HOSTILE_IDS[0], {"rev": 1}, 0), (HOSTILE_IDS[1], {"rev": 5}, 3)]) == {
            HOSTILE_IDS[1]: {"i": 1, "text": HOSTILE_IDS[1]}
        }
        assert guard.get_state(HOSTILE_IDS[0]) == {"rev": 1}
    stats = guard.stats()
    assert stats.pop("put_state_conflicts") == int(guard.native_cas) and not any(stats.values()), stats


@pytest.mark.parametrize("backend", BACKENDS)
def test_entries_expire_after_ttl(backend: str, tmp_path: Path) -> None:
    """Attributions and state written with ttl_s=0.3 are gone 0.5 s later (real clock)."""
    s = _build(backend, tmp_path, ttl_s=0.3)
    s.put_many([("k", A1)])
    s.put_state("c", {"x": 1})
    assert s.get_many(["k"]) == [A1]
    time.sleep(0.5)
    assert s.get_many(["k"]) == [None]
    assert s.get_state("c") is None
    s.close()


def test_threads_share_a_store(store: AttributionStore) -> None:
    """Eight threads writing and reading their own keys see exactly their own values."""

    def work(t: int) -> None:
        for i in range(25):
            key, value = f"t{t}-{i}", Authorship((f"m{t}",), i + 1, float(i), f"c{t}")
            store.put_many([(key, value)])
            assert store.get_many([key]) == [value]
            store.put_state(f"c{t}", {"i": i})
            assert store.get_state(f"c{t}") == {"i": i}

    assert run_in_threads(work, 8) == []


# -- failures: every backend raises StoreError, the guard counts them alike ----------------------

OPS = {
    "get": lambda s: s.get_many(["k1", "k2"]),
    "put": lambda s: s.put_many([("k1", A1)]),
    "get_state": lambda s: s.get_state("c1"),
    "put_state": lambda s: s.put_state("c1", {"n": 1}),
}

FAILURES = [
    # memory cannot time out or hold undecodable values (in-process objects): it can only be closed
    ("memory", "down", ("get", "put", "get_state", "put_state")),
    ("sqlite", "down", ("get", "put", "get_state", "put_state")),
    ("sqlite", "timeout", ("put", "put_state")),  # WAL readers are never blocked by a writer
    ("redis", "down", ("get", "put", "get_state", "put_state")),
    ("redis", "timeout", ("get", "put", "get_state", "put_state")),
]
KIND = {"down": (StoreError, "errors"), "timeout": (StoreTimeout, "timeouts")}


@contextlib.contextmanager
def _failing(backend: str, failure: str, tmp_path: Path) -> Iterator[AttributionStore]:
    """A backend in the given failure state (its own, or a private server/socket; never the shared Redis)."""
    if backend == "memory":
        store = _build("memory", tmp_path)
        store.close()
        yield store
    elif backend == "sqlite" and failure == "down":
        store = _build("sqlite", tmp_path)
        store.close()
        yield store
    elif backend == "sqlite":
        store = SQLiteStore(tmp_path / "locked.db", busy_timeout_s=0.05)
        holder = sqlite3.connect(tmp_path / "locked.db", isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")  # another writer holds the lock past the busy timeout
        try:
            yield store
        finally:
            holder.execute("ROLLBACK")
            holder.close()
            store.close()
    elif failure == "down":
        store = RedisStore(
            StoreConfig(backend="redis", url=f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.05)
        )
        yield store
    else:
        with silent_server() as port:
            yield RedisStore(StoreConfig(backend="redis", url=f"redis://127.0.0.1:{port}/0", timeout_s=0.05))


@pytest.mark.parametrize(("backend", "failure", "ops"), FAILURES, ids=[f"{b}-{f}" for b, f, _ in FAILURES])
def test_backend_failures_raise_store_errors_and_are_counted_alike(
    backend: str, failure: str, ops: tuple[str, ...], tmp_path: Path
) -> None:
    """Down or timed out: each backend raises the same StoreError kind; behind GuardedStore each is
    counted under <op>_<kind> and reported to the pipeline, whichever backend it was."""
    error, kind = KIND[failure]
    reported: list[tuple[str, str]] = []
    with _failing(backend, failure, tmp_path) as raw:
        for op in ops:
            with pytest.raises(error):
                OPS[op](raw)
        guarded = GuardedStore(raw, on_failure=lambda op, k: reported.append((op, k)), trip_after=100)
        for op in ops:
            with pytest.raises(error):
                OPS[op](guarded)
        stats, operations = guarded.stats(), guarded.operations()
    assert {op: stats[f"{op}_{kind}"] for op in ops} == dict.fromkeys(ops, 1)
    assert {op: operations[op] for op in ops} == dict.fromkeys(ops, 1)  # every call failed: ratio 1
    assert reported == [(op, kind) for op in ops]


def test_the_guard_counts_each_backend_call_as_one_operation(store: AttributionStore) -> None:
    """``operations()`` (``handoffmon_store_operations_total{op}``) counts one per call whatever it
    carries, as failures are counted: a put of 3 keys is one ``put``; a merge is one ``get``
    where the backend merges natively, else a ``get`` and a ``put`` through the guard; a merge
    with a state read also one ``get_state``; an empty call reaches no backend and counts
    nothing. Healthy calls fail nothing."""
    guard = GuardedStore(store)
    assert guard.operations() == {"get": 0, "put": 0, "get_state": 0, "put_state": 0}
    guard.put_many([("k1", A1), ("k2", A2), ("k3", MARKER)])
    assert guard.get_many(["k1", "k2", "k3", "nope"]) == [A1, A2, MARKER, None]
    guard.get_many([])
    guard.put_state("c1", {"n": 1})
    assert guard.get_state("c1") == {"n": 1}
    assert guard.operations() == {"get": 1, "put": 1, "get_state": 1, "put_state": 1}
    native = bool(getattr(store, "native_merge", False))
    guard.merge_many([("k1", A2)], lambda old, new: new)
    assert guard.operations() == {"get": 2, "put": 1 + (not native), "get_state": 1, "put_state": 1}
    assert guard.merge_many_get_state([("k2", A1)], lambda old, new: new, "c1") == {"n": 1}
    assert guard.operations() == {"get": 3, "put": 1 + 2 * (not native), "get_state": 2, "put_state": 1}
    stats = guard.stats()
    assert not any(stats.values()), stats


def test_calls_skipped_while_backing_off_are_operations_too(tmp_path: Path) -> None:
    """A closed backend behind a guard that trips at once: the first call fails, the next ones
    are skipped; each is an operation, so failures (errors + skipped) / operations stays 1
    through the pause instead of counting skipped calls against no calls."""
    raw = _build("memory", tmp_path)
    raw.close()
    guard = GuardedStore(raw, trip_after=1, retry_after_s=60.0)
    for _ in range(4):
        with pytest.raises(StoreError):
            guard.get_many(["k"])
    stats = guard.stats()
    assert (stats["get_errors"], stats["get_skipped"]) == (1, 3)
    assert guard.operations()["get"] == 4


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_corrupt_values_raise_with_the_readable_part_and_the_guard_returns_it(
    backend: str, tmp_path: Path
) -> None:
    """An undecodable value: CorruptValue carries the rest of the answer; the guard returns it (the bad
    key as None), counts kind=corrupt and does not back off (the backend answered)."""
    store = _build(backend, tmp_path)
    store.put_many([("good", A1)])
    _corrupt(store, backend, tmp_path)
    with pytest.raises(CorruptValue) as err:
        store.get_many(["good", "bad", "missing"])
    assert err.value.partial == [A1, None, None]
    with pytest.raises(CorruptValue):
        store.get_state("conv")
    guarded = GuardedStore(store, trip_after=1)
    assert guarded.get_many(["good", "bad"]) == [A1, None]
    assert guarded.get_state("conv") is None
    assert (guarded.stats()["get_corrupt"], guarded.stats()["get_state_corrupt"]) == (1, 1)
    assert guarded.available and guarded.get_many(["good"]) == [A1]
    guarded.put_many([("bad", A2)])  # the next write repairs the key
    assert guarded.get_many(["bad"]) == [A2]
    store.close()


def _corrupt(store: AttributionStore, backend: str, tmp_path: Path) -> None:
    if backend == "sqlite":
        conn = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
        conn.execute("INSERT INTO handoffmon_attribution VALUES ('bad', 'not json', 1, 1.0, 'c', 9e99)")
        conn.execute("INSERT INTO handoffmon_conversation_state VALUES ('conv', '{broken', 9e99)")
        conn.close()
        return
    import redis

    prefix = store._keys.prefix  # type: ignore[attr-defined]
    raw = redis.Redis(host="127.0.0.1", port=6379)
    raw.set(f"{prefix}a:bad", b"\xff not json", px=60_000)
    raw.set(f"{prefix}s:conv", b"[1, 2]", px=60_000)
    raw.close()


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_shared_stores_write_states_compare_and_set(backend: str, tmp_path: Path) -> None:
    """``put_states_if`` writes a state only while the stored one has the revision it was folded
    from, and answers a refused write with the state stored now; a state without a revision
    (older releases) or an unreadable one has revision 0; the revision is read from the blob's
    start or, when ``rev`` is not its first key, from the decoded state."""
    store: Any = _build(backend, tmp_path)
    try:
        assert store.native_cas
        assert store.put_states_if([("c1", {"rev": 1, "v": 1, "depth": 1}, 0)]) == {}
        assert store.get_state("c1") == {"rev": 1, "v": 1, "depth": 1}
        # another writer folded from revision 0 too: refused, told what is stored now
        assert store.put_states_if([("c1", {"rev": 1, "v": 1, "depth": 9}, 0)]) == {
            "c1": {"rev": 1, "v": 1, "depth": 1}
        }
        assert store.get_state("c1") == {"rev": 1, "v": 1, "depth": 1}
        store.put_state("old", {"v": 1, "depth": 4})  # written before revisions were kept
        store.put_state("late", {"v": 1, "rev": 5})  # rev not first
        out = store.put_states_if(
            [
                ("c1", {"rev": 2, "v": 1, "depth": 2}, 1),
                ("old", {"rev": 1, "v": 1, "depth": 5}, 0),
                ("late", {"rev": 5, "v": 1}, 4),
                ("new", {"rev": 1, "v": 1}, 3),  # absent: revision 0
            ]
        )
        assert out == {"late": {"v": 1, "rev": 5}, "new": None}
        assert store.get_state("c1") == {"rev": 2, "v": 1, "depth": 2}
        assert store.get_state("old") == {"rev": 1, "v": 1, "depth": 5}
    finally:
        store.close()
