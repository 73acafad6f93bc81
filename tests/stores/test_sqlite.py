"""Pins the SQLite store: roundtrip, TTL, state, threads, processes, restarts, StoreError."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from handoffmon.errors import StoreError
from handoffmon.pipeline.aggregates import load_counts_sqlite
from handoffmon.protocols import AttributionStore, Authorship
from handoffmon.runtime import build_runtime
from handoffmon.stores.sqlite import SQLiteStore
from handoffmon.testing import FakeClock
from tests.pipeline.helpers import make_config, run_conversation
from tests.stores.helpers import run_in_threads

A = Authorship(("gpt-4o", "claude"), 3, 12.5, "conv-1")


def test_satisfies_the_protocol(tmp_path: Path) -> None:
    """SQLiteStore is an AttributionStore."""
    store = SQLiteStore(tmp_path / "a.db")
    assert isinstance(store, AttributionStore)
    store.close()


def test_roundtrip_keeps_every_field_and_order(tmp_path: Path) -> None:
    """Authors, depth, created_at and conversation id come back; missing keys are None."""
    store = SQLiteStore(tmp_path / "a.db")
    store.put_many([("k1", A), ("k2", Authorship((), 0, 1.0, ""))])
    assert store.get_many(["k2", "nope", "k1"]) == [Authorship((), 0, 1.0, ""), None, A]
    store.close()


def test_large_batches_are_chunked(tmp_path: Path) -> None:
    """Batches beyond SQLite's variable limit work (one call, many keys)."""
    store = SQLiteStore(tmp_path / "a.db")
    items = [(f"k{i}", Authorship(("m",), i, 0.0, "c")) for i in range(1500)]
    store.put_many(items)
    got = store.get_many([k for k, _ in items])
    assert [a.depth for a in got if a is not None] == list(range(1500))
    store.close()


def test_ttl_hides_and_purges_expired_rows(tmp_path: Path) -> None:
    """Rows expire ttl_s after their write: invisible at once, deleted by purge."""
    clock = FakeClock()
    store = SQLiteStore(tmp_path / "a.db", ttl_s=10, clock=clock)
    store.put_many([("old", A)])
    store.put_state("conv-1", {"x": 1})
    clock.now += 5
    store.put_many([("new", A)])
    clock.now += 6
    assert store.get_many(["old", "new"]) == [None, A]
    assert store.get_state("conv-1") is None
    assert store.purge() == 2
    store.close()


def test_state_roundtrip_and_replace(tmp_path: Path) -> None:
    """put_state replaces a conversation's JSON state; unknown ids read None."""
    store = SQLiteStore(tmp_path / "a.db")
    store.put_state("c", {"verdicts": {"r": "pass"}, "n": 1})
    store.put_state("c", {"verdicts": {"r": "fail"}, "n": 2})
    assert store.get_state("c") == {"verdicts": {"r": "fail"}, "n": 2}
    assert store.get_state("other") is None
    with pytest.raises(StoreError):
        store.put_state("c", {"bad": object()})
    store.close()


def test_threads_share_one_file(tmp_path: Path) -> None:
    """Writers on several threads (one connection each) lose nothing."""
    store = SQLiteStore(tmp_path / "a.db")

    def work(t: int) -> None:
        for i in range(50):
            store.put_many([(f"{t}:{i}", Authorship((f"m{t}",), i, 0.0, f"c{t}"))])
            store.get_many([f"{t}:{i}"])

    errors = run_in_threads(work, 4)
    assert errors == []
    keys = [f"{t}:{i}" for t in range(4) for i in range(50)]
    assert all(v is not None for v in store.get_many(keys))
    store.close()


_WRITER = """
import sys
from handoffmon.attribution import Attributor
from handoffmon.stores.sqlite import SQLiteStore
store = SQLiteStore(sys.argv[1])
attributor = Attributor(store)
history = []
for k, author in enumerate(["gpt-4o", "claude", "gpt-4o"]):
    history.append({"role": "user", "content": f"question {k}"})
    ctx = attributor.attribute(history)
    reply = f"answer number {k}, long enough to also get a content key"
    attributor.persist(attributor.record(ctx, reply, [author]))
    history.append({"role": "assistant", "content": reply})
store.close()
"""

_READER = """
import sys
from handoffmon.attribution import Attributor
from handoffmon.stores.sqlite import SQLiteStore
store = SQLiteStore(sys.argv[1])
history = []
for k in range(3):
    history.append({"role": "user", "content": f"question {k}"})
    reply = f"answer number {k}, long enough to also get a content key"
    history.append({"role": "assistant", "content": reply})
ctx = Attributor(store).attribute([*history, {"role": "user", "content": "next"}])
print(ctx.depth, ctx.prefix_model, " ".join(f"{a.author}/{a.depth}/{a.method}" for a in ctx.attributions))
"""


def _python(code: str, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_attributions_survive_restart_across_processes(tmp_path: Path) -> None:
    """One process plays a conversation and exits; a new process attributes it from the file."""
    db = str(tmp_path / "shared.db")
    _python(_WRITER, db)
    assert _python(_READER, db) == "4 gpt-4o gpt-4o/1/chain claude/2/chain gpt-4o/3/chain"


def test_concurrent_processes_write_safely(tmp_path: Path) -> None:
    """Two processes writing at the same time (WAL + busy timeout) lose no rows."""
    db = str(tmp_path / "busy.db")
    SQLiteStore(db).close()
    code = """
    import sys
    from handoffmon.protocols import Authorship
    from handoffmon.stores.sqlite import SQLiteStore
    store = SQLiteStore(sys.argv[1])
    for i in range(200):
        store.put_many([(f"{sys.argv[2]}:{i}", Authorship(("m",), i, 0.0, "c"))])
    store.close()
    """
    procs = [
        subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), db, tag], stderr=subprocess.PIPE)
        for tag in ("p", "q")
    ]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    store = SQLiteStore(db)
    got = store.get_many([f"{t}:{i}" for t in "pq" for i in range(200)])
    assert all(v is not None for v in got)
    store.close()


def test_failures_raise_store_error(tmp_path: Path) -> None:
    """An unusable file, or use after close, raises StoreError naming the file (the store is
    still built: ``open_error`` says why it could not open). (A directory there is refused
    outright: ``test_a_store_path_that_is_a_directory_is_refused_...``.)"""
    (tmp_path / "bad.db").write_bytes(b"not a database" * 100)
    unusable = SQLiteStore(tmp_path / "bad.db")
    assert unusable.open_error is not None and "bad.db" in str(unusable.open_error)
    with pytest.raises(StoreError, match=r"bad\.db"):
        unusable.get_many(["k"])
    store = SQLiteStore(tmp_path / "ok.db")
    store.close()
    with pytest.raises(StoreError):
        store.get_many(["k"])


def test_connections_of_finished_threads_are_closed(tmp_path: Path) -> None:
    """Short-lived threads do not accumulate open connections."""
    store = SQLiteStore(tmp_path / "a.db")
    for t in range(20):
        assert run_in_threads(lambda i, t=t: store.put_many([(f"{t}:{i}", A)]), 1) == []
    assert len(store._all) <= 2
    assert store.get_many(["0:0", "19:0"]) == [A, A]
    store.close()


GARBAGE = b"this is not a database" * 100


def test_an_unopenable_file_starts_degraded_and_recovers(tmp_path: Path) -> None:
    """A corrupt SQLite file (audit e6/e10: ``serve`` and ``wrap()`` refused to start) is no
    configuration error: the runtime starts, the store fails open (attribution unknown,
    ``healthy`` False, counted), the aggregates count in memory; once the file can be opened,
    both are retried after ``store.backoff_s`` and what was counted meanwhile reaches the file."""
    path = tmp_path / "handoffmon.db"
    path.write_bytes(GARBAGE)
    cfg = make_config(store={"backend": "sqlite", "path": str(path), "backoff_s": 0.2})
    rt = build_runtime(cfg, registry=None)  # raised ConfigError before
    m = rt.monitor
    try:
        assert not m.store.healthy  # /readyz: store failing_open from the start
        stats = m.store.stats()
        assert stats["get_errors"] == 1 and stats["aggregates_errors"] == 1
        # the failure at start, counted before the exporters were attached, is exported too
        exported = rt.registry.get_sample_value("handoffmon_monitor_errors_total", {"stage": "store"})
        assert exported == m.snapshot().monitor_errors["store"] >= 1
        run_conversation(m, ["a", "b"])
        assert m.flush(10)
        assert sum(m.snapshot().turns.values()) == 2  # counted in memory
        failed = m.store.stats()
        assert failed["get_errors"] + failed["get_skipped"] > 1  # the turns' store calls failed open
        path.unlink()  # the operator replaces the file
        time.sleep(0.3)  # past store.backoff_s
        run_conversation(m, ["a", "b"], user="again")
        assert m.flush(10)
        assert m.store.healthy  # the store answers again
    finally:
        rt.close()
    assert sum(load_counts_sqlite(path).turns.values()) == 4  # the turns counted while degraded too
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM handoffmon_attribution").fetchone()[0] > 0


def test_a_missing_directory_is_not_created_and_names_store_path_and_the_file(tmp_path: Path) -> None:
    """``store.path: /var/lib/handofmon/h.db`` (a typo) silently created the directory and a
    fresh database beside the real one; now the store is not built and the runtime's error
    names ``store.path`` and the config file, before anything is created."""
    from handoffmon.config import load_config
    from handoffmon.errors import ConfigError
    from handoffmon.stores.sqlite import MissingDirectory

    missing = tmp_path / "typo" / "h.db"
    with pytest.raises(MissingDirectory, match="does not exist"):
        SQLiteStore(missing)
    (tmp_path / "file").write_text("x")
    with pytest.raises(MissingDirectory, match="is not a directory"):
        SQLiteStore(tmp_path / "file" / "h.db")
    cfg = tmp_path / "h.yaml"
    cfg.write_text(f"store:\n  backend: sqlite\n  path: {missing}\n")
    with pytest.raises(ConfigError) as exc:
        build_runtime(load_config(cfg, environ={}), registry=None)
    assert exc.value.key == "store.path" and exc.value.source == str(cfg), str(exc.value)
    assert str(missing.parent) in str(exc.value)
    assert not missing.parent.exists()


def test_a_store_path_that_is_a_directory_is_refused_naming_store_path_and_the_file(tmp_path: Path) -> None:
    """``store.path: /var/lib/handoffmon`` (the directory, not a file in it) started "degraded"
    and stayed so for ever: the store and the aggregates tried to open the directory every
    ``store.backoff_s`` ("unable to open database file"), every turn's attribution unknown,
    nothing persisted. Like a missing directory it can only be a mistake: refused before
    anything starts, naming ``store.path`` and the config file."""
    from handoffmon.config import load_config
    from handoffmon.errors import ConfigError
    from handoffmon.stores.sqlite import NotAFile

    with pytest.raises(NotAFile, match="is a directory"):
        SQLiteStore(tmp_path)
    with pytest.raises(NotAFile, match="not a regular file"):
        SQLiteStore("/dev/null")
    cfg = tmp_path / "h.yaml"
    cfg.write_text(f"store:\n  backend: sqlite\n  path: {tmp_path}\n")
    with pytest.raises(ConfigError) as exc:
        build_runtime(load_config(cfg, environ={}), registry=None)
    assert exc.value.key == "store.path" and exc.value.source == str(cfg), str(exc.value)
    assert "is a directory" in str(exc.value) and "handoffmon.db" in str(exc.value)


def test_serve_with_a_missing_store_directory_exits_1_naming_the_key(tmp_path: Path) -> None:
    """``handoffmon serve`` stops before listening, with the file and ``store.path`` (before,
    it created the directory and served; the timeout ends such a run)."""
    from tests.conftest import free_port

    missing = tmp_path / "typo" / "h.db"
    cfg = tmp_path / "h.yaml"
    cfg.write_text(f"store:\n  backend: sqlite\n  path: {missing}\n")
    args = ["serve", "--config", str(cfg), "--upstream", "http://127.0.0.1:9", "--port", str(free_port())]
    res = subprocess.run(
        [sys.executable, "-m", "handoffmon", *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert res.returncode == 1, res.stderr
    assert str(cfg) in res.stderr and "store.path" in res.stderr and "does not exist" in res.stderr
    assert "handoffmon serve: http" not in res.stderr and "Traceback" not in res.stderr
    assert not missing.parent.exists()


def test_writes_failing_between_reads_that_answer_still_trip_the_breaker(tmp_path: Path) -> None:
    """Another process holds the file's write lock (WAL: reads still answer). Each turn reads,
    then writes: every write waited the busy timeout and failed, and the read in between reset
    the breaker, so it never tripped and ``healthy`` (``/readyz``) said ``ok`` while no write
    went through (a full disk alike: 947 write errors, 0 skipped, in a 300-turn run). A read
    answering no longer clears failing writes: the third failed write trips the breaker."""
    from handoffmon.errors import StoreSkipped, StoreTimeout
    from handoffmon.stores import GuardedStore

    path = tmp_path / "h.db"
    store = SQLiteStore(path, busy_timeout_s=0.05)
    store.put_many([("k", A)])
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_WRITE_LOCK, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        clock = FakeClock()
        guard = GuardedStore(store, clock=clock, trip_after=3, retry_after_s=1.0)
        for _ in range(3):
            assert guard.get_many(["k"]) == [A]  # reads answer
            with pytest.raises(StoreTimeout):
                guard.put_many([("k2", A)])
            assert not guard.healthy
        with pytest.raises(StoreSkipped):
            guard.put_many([("k2", A)])
        stats = guard.stats()
        assert (stats["put_timeouts"], stats["put_skipped"], stats["get_errors"]) == (3, 1, 0), stats
    finally:
        assert holder.stdin is not None
        holder.stdin.close()  # the holder commits and exits
        holder.wait(10)
    clock.now += 1.5  # past the pause: the lock is gone, the write goes through
    guard.put_many([("k2", A)])
    assert guard.healthy and guard.get_many(["k2"]) == [A]
    store.close()


HOLD_WRITE_LOCK = textwrap.dedent(
    """
    import sqlite3, sys
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    sys.stdin.read()
    conn.execute("COMMIT")
    """
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_opens_its_own_connections_and_leaves_the_parents_alone(tmp_path: Path) -> None:
    """SQLite forbids using a connection across ``fork`` (``gunicorn --preload``: the store is
    opened in the master). The child's main thread went on with the parent's connection, and
    its first new thread closed the parent's other connections (``_prune_dead_threads``: the
    parent's threads look dead in the child). Now the child opens its own on every thread, the
    inherited ones stay open and unused, and both processes' writes land in one sound file."""
    store = SQLiteStore(tmp_path / "h.db")
    store.put_many([("parent-main", A)])
    assert run_in_threads(lambda i: store.put_many([("parent-thread", A)]), 1) == []
    parents = list(store._all.values())
    inherited = {id(c) for c in parents}
    assert len(inherited) == 2
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            store.put_many([("child-main", A)])
            errors = run_in_threads(lambda i: store.put_many([(f"child-thread-{i}", A)]), 2)
            used = {id(c) for c in store._all.values()}
            still_open = all(c.total_changes >= 0 for c in parents)  # a closed one raises
            got = store.get_many(["parent-main", "parent-thread", "child-main", "child-thread-0"])
            out = {"reused": sorted(used & inherited), "errors": [repr(e) for e in errors]}
            out |= {"open": still_open, "read": [a is not None for a in got]}
        except BaseException as exc:
            out = {"error": repr(exc)}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as pipe:
        result = json.loads(pipe.read())
    os.waitpid(pid, 0)
    assert result == {"reused": [], "errors": [], "open": True, "read": [True] * 4}, result
    store.put_many([("parent-after", A)])
    assert store.get_many(["child-main", "child-thread-1", "parent-after"]) == [A, A, A]
    with sqlite3.connect(tmp_path / "h.db") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    store.close()


def test_a_backlog_of_expired_rows_is_purged_in_batches_across_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After days stopped, the first write's purge deleted every expired row in its write
    transaction (1M rows: 0.95 s holding the lock other processes wait on, 5 s at most). Now
    each write purges at most PURGE_BATCH rows per table and the next write goes on until none
    remain; ``purge()`` still empties the backlog in one call."""
    from handoffmon.stores import sqlite as module

    monkeypatch.setattr(module, "PURGE_BATCH", 100)
    clock = FakeClock()
    path = tmp_path / "h.db"
    store = SQLiteStore(path, ttl_s=10, clock=clock, purge_every_s=60)
    store.put_many([(f"k{i}", A) for i in range(250)])
    for i in range(250):
        store.put_state(f"c{i}", {"i": i})

    def expired() -> tuple[int, int]:
        with sqlite3.connect(path) as conn:
            a = conn.execute("SELECT count(*) FROM handoffmon_attribution WHERE expires_at <= ?", (clock(),))
            s = conn.execute(
                "SELECT count(*) FROM handoffmon_conversation_state WHERE expires_at <= ?", (clock(),)
            )
            return a.fetchone()[0], s.fetchone()[0]

    clock.now += 100  # everything expired
    assert expired() == (250, 250)
    store.put_many([("new", A)])
    assert expired() == (150, 150)
    store.put_state("new", {"x": 1})
    assert expired() == (50, 50)
    store.put_many([("newer", A)])
    assert expired() == (0, 0)
    assert store.get_many(["new", "newer", "k0"]) == [A, A, None]
    store.put_many([(f"m{i}", A) for i in range(230)])
    clock.now += 100
    assert store.purge() == 232 + 1  # three batches in one call: m*, new and newer; the state "new"
    assert expired() == (0, 0)
    store.close()
