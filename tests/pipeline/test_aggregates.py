"""Aggregates: exact counting by key, SQLite persistence across restarts, the refit loader."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from handoffmon.counts import CheckKey, ShadowKey, TransitionKey, TurnKey
from handoffmon.errors import StoreError
from handoffmon.pipeline.aggregates import Aggregates, load_counts_sqlite
from handoffmon.pipeline.monitor import Monitor
from handoffmon.testing import make_turn_result
from handoffmon.types import CheckResult, MessageAttribution, Transition, TurnContext, TurnRecord, TurnResult
from tests.pipeline.helpers import make_config


def _result(author: str = "b", prefix: str = "a", handoff: bool | None = True) -> TurnResult:
    ctx = TurnContext(
        conversation_id="c",
        conversation_id_source="caller",
        depth=3,
        history_chars=10,
        history_tokens=3,
        prefix_model=prefix,
        prefix_purity=1.0,
        prefix_authors=1,
        attributions=(
            MessageAttribution(1, "a", ("a",), 1, "chain"),
            MessageAttribution(3, "a", ("a",), 2, "content"),
        ),
        history_fingerprint=1,
    )
    rec = TurnRecord(author, (author,), None, "g", 0, 0, 0.1, 5, False, handoff)
    return TurnResult(
        context=ctx,
        record=rec,
        depth_bucket="3-4",
        checks=(CheckResult("r", "fail"), CheckResult("s", "pass")),
        transitions=(Transition("r", "pass", "fail"),),
        attribution_methods=("chain", "content"),
    )


def test_add_turn_counts_every_key() -> None:
    """One turn adds one to its turn cell, each check, each transition and each attribution method."""
    agg = Aggregates()
    agg.add_turn(_result())
    agg.add_turn(_result(handoff=None))
    snap = agg.snapshot()
    assert snap.turns == {TurnKey("b", "a", "3-4", "true"): 1, TurnKey("b", "a", "3-4", "unknown"): 1}
    assert snap.checks[CheckKey("r", "b", "a", "3-4", "fail")] == 2
    assert snap.checks[CheckKey("s", "b", "a", "3-4", "pass")] == 2
    assert snap.transitions == {
        TransitionKey("r", "b", "true", "pass", "fail"): 1,
        TransitionKey("r", "b", "unknown", "pass", "fail"): 1,
    }
    assert snap.attributions == {"chain": 2, "content": 2}
    assert snap.total_turns == 2


def test_errors_drops_and_sessions() -> None:
    """Monitor errors by stage, drops and session lengths are counted."""
    agg = Aggregates()
    agg.count_error("export")
    agg.count_error("export", 2)
    agg.count_dropped(3)
    agg.count_session(7)
    snap = agg.snapshot()
    assert snap.monitor_errors == {"export": 3}
    assert snap.dropped == 3
    assert snap.session_lengths == {7: 1}


def test_session_lengths_follow_conversations() -> None:
    """Each conversation is counted once, at the deepest turn seen so far."""
    agg = Aggregates()
    for old, new in ((0, 1), (1, 2), (2, 3), (0, 1), (3, 4)):
        agg.move_session(old, new)
    assert agg.snapshot().session_lengths == {1: 1, 4: 1}


def test_sqlite_restart_loses_nothing_flushed(tmp_path: Path) -> None:
    """Totals persisted by one instance are the starting totals of the next; load_counts_sqlite agrees."""
    path = str(tmp_path / "agg.db")
    first = Aggregates(path)
    for _ in range(3):
        first.add_turn(_result())
    first.count_dropped()
    first.count_error("persist")
    first.close()
    second = Aggregates(path)
    second.add_turn(_result())
    second.close()
    loaded = load_counts_sqlite(path)
    assert loaded.turns == {TurnKey("b", "a", "3-4", "true"): 4}
    assert loaded.checks[CheckKey("r", "b", "a", "3-4", "fail")] == 4
    assert loaded.dropped == 1
    assert loaded.monitor_errors == {"persist": 1}
    assert Aggregates(path).snapshot() == loaded


def test_two_writers_on_one_file_add_up(tmp_path: Path) -> None:
    """Increments are written as deltas, so two processes' monitors sharing a file both count."""
    path = str(tmp_path / "agg.db")
    a, b = Aggregates(path), Aggregates(path)
    threads = []
    for agg in (a, b):

        def work(agg: Aggregates = agg) -> None:
            for _ in range(50):
                agg.add_turn(_result())
                agg.flush()

        threads.append(threading.Thread(target=work))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    a.close()
    b.close()
    assert load_counts_sqlite(path).total_turns == 100


def test_a_file_locked_by_another_process_neither_stalls_the_writer_nor_loses_counts(tmp_path: Path) -> None:
    """Another connection holds the file's write lock: a flush gives up after about
    ``LOCK_WAIT_S`` (not SQLite's 30 s it waited before), keeps the increments pending, and
    does not try again before ``retry_s`` (a locked file costs one wait per retry, not one per
    idle turn); once the lock is gone, the next flush writes every increment."""
    from handoffmon.pipeline.aggregates import LOCK_WAIT_S

    path = str(tmp_path / "agg.db")
    now = [0.0]
    agg = Aggregates(path, retry_s=10.0, clock=lambda: now[0])
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process's write transaction
    try:
        agg.add_turn(_result())
        t0 = time.monotonic()
        with pytest.raises(StoreError, match="cannot persist aggregates"):
            agg.flush()
        assert time.monotonic() - t0 < LOCK_WAIT_S + 2.0
        agg.add_turn(_result())
        t0 = time.monotonic()
        agg.flush()  # within retry_s: not tried, nothing raised, nothing waited for
        assert time.monotonic() - t0 < 0.1
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    now[0] = 11.0
    agg.flush()
    assert load_counts_sqlite(path).total_turns == 2
    agg.add_turn(_result())
    agg.close()  # the last write goes out at once, whatever the back-off
    assert load_counts_sqlite(path).total_turns == 3


def test_a_failed_write_adds_its_increments_back_to_those_counted_meanwhile(tmp_path: Path) -> None:
    """A write that fails puts its increments back into the pending ones, adding to what other
    threads counted while it was writing (the pending table was swapped for a fresh one)."""
    path = str(tmp_path / "agg.db")
    agg = Aggregates(path, retry_s=0.0)
    agg.add_turn(_result())
    agg.count_error("pipeline")
    write = agg._write

    def fails(rows: list[tuple[str, str, int]]) -> None:
        agg.add_turn(_result())  # counted by another thread during the write
        agg.count_error("pipeline")
        raise sqlite3.OperationalError("disk I/O error")

    agg._write = fails  # type: ignore[method-assign]
    with pytest.raises(StoreError, match="cannot persist aggregates"):
        agg.flush()
    agg._write = write  # type: ignore[method-assign]
    agg.flush()
    stored = load_counts_sqlite(path)
    assert stored.total_turns == 2 and stored.monitor_errors == {"pipeline": 2}
    assert agg.snapshot().total_turns == 2
    agg.close()


def test_load_counts_sqlite_missing_file_is_a_store_error(tmp_path: Path) -> None:
    """A path that does not exist raises StoreError naming it."""
    with pytest.raises(StoreError, match=r"nope\.db"):
        load_counts_sqlite(tmp_path / "nope.db")


def test_names_are_capped_at_ingest_like_labels_and_overflows_are_counted() -> None:
    """With caps of 3 models and 2 rules, 50 distinct authors/prefixes/rules keep at most 3
    models (+ none/unknown/other) and 2 rules (+ other) in memory; every folded lookup counts."""
    from handoffmon.labels import OTHER, LabelGuard

    guard = LabelGuard(max_models=3, max_rules=2)
    agg = Aggregates(guard=guard)
    for i in range(50):
        agg.add_turn(
            make_turn_result(
                author=f"m{i}",
                prefix_model="none" if i % 2 else f"p{i}",
                checks=[(f"r{i}", "pass")],
                transitions=[(f"r{i}", "fail", "pass")],
            )
        )
    snap = agg.snapshot()
    models = {k.model for k in snap.turns} | {k.prefix_model for k in snap.turns}
    rules = {k.rule for k in snap.checks} | {k.rule for k in snap.transitions}
    assert models == {"m0", "p0", "m1", "none", OTHER}
    assert rules == {"r0", "r1", OTHER}
    assert snap.total_turns == 50 and sum(snap.checks.values()) == 50
    overflows = guard.overflows()
    assert overflows["model"] == 48 + 24  # authors m2..m49, prefixes p2..p48 (even)
    assert overflows["rule"] == 48  # r2..r49: one lookup per name per turn
    assert guard.overflow_total == sum(overflows.values())


def test_names_persisted_earlier_are_admitted_first_after_a_restart(tmp_path: Path) -> None:
    """A restart keeps counting the names its SQLite file already holds (most counted first)."""
    from handoffmon.labels import LabelGuard

    path = str(tmp_path / "agg.db")
    first = Aggregates(path, guard=LabelGuard(max_models=2))
    for author, n in (("a", 1), ("b", 3)):
        for _ in range(n):
            first.add_turn(make_turn_result(author=author))
    first.close()
    again = Aggregates(path, guard=LabelGuard(max_models=2))
    again.add_turn(make_turn_result(author="new"))
    assert {k.model for k in again.snapshot().turns} == {"a", "b", "other"}
    again.close()
    tighter = Aggregates(path, guard=LabelGuard(max_models=1))  # room for one: the most counted
    assert "b" in tighter.guard.models and "a" not in tighter.guard.models
    tighter.close()


def test_shadow_pairs_survive_a_restart_and_two_writers_add_up(tmp_path: Path) -> None:
    """Shadow increments are a kind like any other: flushed deltas, reloaded at start, summed by writers."""
    path = str(tmp_path / "agg.db")
    pair = {ShadowKey("r", "a", "b", "prefix_only"): 1, ShadowKey("all", "a", "b", "n2"): 3}
    first, second = Aggregates(path), Aggregates(path)
    first.add_shadow(pair)
    first.add_shadow({ShadowKey("r", "a", "b", "prefix_only"): 2, ShadowKey("r", "a", "b", "bn"): 0})
    second.add_shadow(pair)
    assert first.snapshot().shadow == {
        ShadowKey("r", "a", "b", "prefix_only"): 3,
        ShadowKey("all", "a", "b", "n2"): 3,
    }
    first.close()
    second.close()
    expected = {ShadowKey("r", "a", "b", "prefix_only"): 4, ShadowKey("all", "a", "b", "n2"): 6}
    assert load_counts_sqlite(path).shadow == expected
    assert Aggregates(path).snapshot().shadow == expected


def _reference_add_turn(agg: Aggregates, result: TurnResult, tables: dict[str, dict[object, int]]) -> None:
    """``Aggregates.add_turn`` as it was before its cell stats were inlined (keys through
    ``turn_cell_stats``, every name through the memoized ``guard.rule``)."""
    from collections import Counter

    from handoffmon.counts import turn_cell_stats
    from handoffmon.pipeline.aggregates import handoff_label

    rec, ctx, g = result.record, result.context, agg.guard
    handoff = handoff_label(rec.handoff)
    author, prefix, bucket = g.model(rec.author), g.model(ctx.prefix_model), result.depth_bucket
    memo: dict[str, str] = {}

    def rule(name: str) -> str:
        if name not in memo:
            memo[name] = g.rule(name)
        return memo[name]

    checks = [CheckKey(rule(c.rule), author, prefix, bucket, c.verdict) for c in result.checks]
    cells = turn_cell_stats(result, model=author, prefix_model=prefix, rule=rule)
    transitions = [
        TransitionKey(rule(t.rule), author, handoff, t.from_verdict, t.to_verdict) for t in result.transitions
    ]
    t = {k: tables.setdefault(k, Counter()) for k in ("turns", "checks", "baseline_checks", "cell_stats")}
    t["turns"][TurnKey(author, prefix, bucket, handoff)] += 1
    for key in checks:
        t["checks"][key] += 1
        if result.clean:
            t["baseline_checks"][key] += 1
    for cell, n in cells:
        t["cell_stats"][cell] += n
    for key in transitions:
        tables.setdefault("transitions", Counter())[key] += 1  # type: ignore[index]
    for method in result.attribution_methods:
        tables.setdefault("attributions", Counter())[method] += 1  # type: ignore[index]


@pytest.mark.parametrize(("caps", "plans"), [(None, 1024), ((2, 1), 1024), (None, 2)])
def test_add_turn_matches_the_reference_keys_and_guard_lookups(
    caps: tuple[int, int] | None, plans: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real pipeline's turns: same counts, in the same key order, and (under tight caps)
    the same admissions and overflow counts as the reference; the keys of a turn's shape
    are built once (``_plan``) and kept at most ``PLAN_CACHE`` shapes at a time."""
    from handoffmon.labels import LabelGuard
    from handoffmon.pipeline import aggregates
    from tests.exporters.test_prometheus_tables import _stream

    monkeypatch.setattr(aggregates, "PLAN_CACHE", plans)

    def guard() -> LabelGuard:
        return LabelGuard() if caps is None else LabelGuard(max_models=caps[0], max_rules=caps[1])

    results = _stream()
    new, ref = Aggregates(guard=guard()), Aggregates(guard=guard())
    want: dict[str, dict[object, int]] = {}
    for result in results:
        new.add_turn(result)
        _reference_add_turn(ref, result, want)
    got = new.snapshot()
    for kind, table in want.items():
        assert list(getattr(got, kind).items()) == [(k, n) for k, n in table.items() if n], kind
    assert sum(got.cell_stats.values()) > 0 and got.transitions and got.baseline_checks
    assert new.guard.overflows() == ref.guard.overflows()
    assert new.guard.models == ref.guard.models and new.guard.rules == ref.guard.rules
    if caps is not None:
        assert new.guard.overflows()["rule"] > 0 and new.guard.overflows()["model"] > 0
    assert 0 < len(new._plans) <= plans  # turns were counted from kept plans, within the bound


BAD_ROWS = [
    ("turns", '["model-a","none","1","false","extra"]', 3),  # a key with a 5th field (a newer release)
    ("session_lengths", "abc", 1),  # not an int
    ("checks", "not-json", 1),
    ("checks", "[1,2,3,4,5]", 1),  # fields not names
    ("monitor_errors", "persist", "many"),  # value not an int
]


def test_unreadable_aggregate_rows_are_skipped_counted_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A SQLite aggregates table holding rows this release cannot read (audit e9: one such row
    stopped ``serve`` from starting): the monitor starts with the readable totals, counts the
    rows as ``store_failures{op="aggregates", kind="corrupt"}`` and logs one warning; the
    refit loader skips them too."""
    path = str(tmp_path / "handoffmon.db")
    first = Aggregates(path)
    for _ in range(3):
        first.add_turn(_result())
    first.close()
    expected = Aggregates(path).snapshot()
    conn = sqlite3.connect(path)
    conn.executemany("INSERT INTO handoffmon_counts VALUES (?, ?, ?)", BAD_ROWS)
    conn.commit()
    conn.close()
    caplog.set_level(logging.WARNING, logger="handoffmon")
    m = Monitor(make_config(store={"backend": "sqlite", "path": path}))
    try:
        assert m.snapshot() == expected
        assert m.store.stats()["aggregates_corrupt"] == len(BAD_ROWS)
        warnings = [r for r in caplog.records if "unreadable rows" in r.getMessage()]
        assert len(warnings) == 1 and "5" in warnings[0].getMessage()
        assert load_counts_sqlite(path) == expected
    finally:
        m.close()
