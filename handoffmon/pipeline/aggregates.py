"""Aggregate counters (checks, transitions, turns, attributions, errors, drops, the clean
baseline, per-cell depth and conversation-cluster sums, shadow pairs) in memory and SQLite."""

from __future__ import annotations

import json
import logging
import operator
import sqlite3
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from handoffmon.counts import (
    CELL_TOTAL,
    CLUSTER_STATS,
    PLAN_CACHE,
    CellStatKey,
    CheckKey,
    Counts,
    ShadowKey,
    TransitionKey,
    TurnKey,
    add_cluster_sums,
    in_cell,
    turn_shape,
)
from handoffmon.errors import StoreError
from handoffmon.labels import LabelGuard
from handoffmon.types import TurnResult

_KINDS = (
    "checks",
    "transitions",
    "turns",
    "attributions",
    "monitor_errors",
    "dropped",
    "session_lengths",
    "baseline_checks",
    "cell_stats",
    "shadow",
)
_KEYED: dict[str, Any] = {
    "checks": CheckKey,
    "transitions": TransitionKey,
    "turns": TurnKey,
    "baseline_checks": CheckKey,
    "cell_stats": CellStatKey,
    "shadow": ShadowKey,
}
_KIND_SET = frozenset(_KINDS)
_Plan = tuple[
    TurnKey,
    tuple[CheckKey, ...],
    tuple[CellStatKey, ...],
    tuple[tuple[CellStatKey, ...], ...],
    tuple[TransitionKey, ...],
]
_log = logging.getLogger("handoffmon.pipeline")
_TABLE = "handoffmon_counts"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {_TABLE} (
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY (kind, key)
)
"""


def handoff_label(handoff: bool | None) -> str:
    """``"true"``, ``"false"`` or ``"unknown"`` — the label form of a handoff flag."""
    if handoff is None:
        return "unknown"
    return "true" if handoff else "false"


def _encode(kind: str, key: Any) -> str:
    if kind in _KEYED:
        return json.dumps(list(key), separators=(",", ":"))
    return str(key)


def _decode(kind: str, raw: str) -> Any:
    """A stored key; ``ValueError``/``TypeError`` when this release cannot read it."""
    key_type = _KEYED.get(kind)
    if key_type is not None:
        fields = json.loads(raw)
        if (
            not isinstance(fields, list)
            or len(fields) != len(key_type._fields)
            or not all(type(f) is str for f in fields)
        ):
            raise ValueError(f"not a {key_type.__name__}")
        return key_type(*fields)
    if kind == "session_lengths":
        return int(raw)
    return str(raw)


def _decode_rows(
    rows: Iterable[tuple[str, str, int]], source: object
) -> tuple[list[tuple[str, Any, int]], int]:
    """Readable ``(kind, key, value)`` rows of the aggregates table (kinds this release does not
    know are left out) and how many rows of known kinds could not be read: skipped, one
    warning per call naming ``source`` (one bad row, e.g. from another release or a hand
    edit, must not stop the monitor from starting)."""
    out: list[tuple[str, Any, int]] = []
    bad = 0
    for kind, raw, value in rows:
        if kind not in _KIND_SET:
            continue
        try:
            out.append((kind, _decode(kind, raw), int(value)))
        except (ValueError, TypeError, OverflowError):
            bad += 1
    if bad:
        _log.warning(
            "handoffmon: %s: skipped %d unreadable rows of the aggregates table %s "
            '(counted as handoffmon_store_failures_total{op="aggregates", kind="corrupt"})',
            source,
            bad,
            _TABLE,
        )
    return out, bad


LOCK_WAIT_S = 0.25
"""How long a write of the aggregates waits for another process's write lock on the file
(SQLite's busy timeout). The writes run on a check worker's idle turn: a file locked for
seconds by another process must not stall the checks (it held them 30 s before). A write
that cannot get the lock keeps its increments pending and is tried again ``retry_s`` later;
writers sharing a file hold the lock for milliseconds."""
CLOSE_LOCK_WAIT_S = 5.0
"""The last write, at close, waits longer: nothing is tried after it."""


def _connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=LOCK_WAIT_S, check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(_SCHEMA)
    return conn


def _counts_from_rows(rows: Iterable[tuple[str, str, int]], source: object) -> Counts:
    tables: dict[str, dict[Any, int]] = {k: {} for k in _KINDS}
    for kind, key, value in _decode_rows(rows, source)[0]:
        if value > 0 or (value and kind != "session_lengths"):  # a torn move reads as 0 (_check_rows)
            tables[kind][key] = value
    return Counts(
        checks=tables["checks"],
        transitions=tables["transitions"],
        turns=tables["turns"],
        attributions=tables["attributions"],
        monitor_errors=tables["monitor_errors"],
        dropped=sum(tables["dropped"].values()),
        session_lengths=tables["session_lengths"],
        baseline_checks=tables["baseline_checks"],
        cell_stats=tables["cell_stats"],
        shadow=tables["shadow"],
    )


def load_counts_sqlite(path: str | Path, *, strict: bool = False) -> Counts:
    """Read the aggregates a monitor persisted into a SQLite file (the refit CLI's input).

    Rows this release cannot read are skipped with a warning, unless ``strict`` (the refit's
    SQLite source): then the first one, or a count that is not an integer ≥ 0, is an error, so
    a damaged or hand-edited file is never refitted with some of its counters missing.

    Raises:
        StoreError: the file cannot be opened or has no aggregates table; with ``strict``, an
            unreadable row or a count that is not an integer ≥ 0 (kind and key named).
    """
    if not Path(path).exists():
        raise StoreError(f"{path}: no such SQLite file")
    try:
        conn = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True, timeout=30.0)
        try:
            rows = conn.execute(f"SELECT kind, key, value FROM {_TABLE}").fetchall()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StoreError(f"{path}: cannot read handoffmon aggregates: {exc}") from exc
    if strict:
        _check_rows(rows, path)
    return _counts_from_rows(rows, path)


def _check_rows(rows: Iterable[tuple[str, str, int]], source: object) -> None:
    """``StoreError`` for the first row of a known kind whose key this release cannot read or
    whose count is not an integer ≥ 0 (SQLite keeps any value in an INTEGER column).

    A session length may be negative: a conversation's move to a deeper length (−1 at the old,
    +1 at the new) is written by the worker that served the turn, and the +1 that put it at the
    old length by another one, whose flush can come later or, after a crash, never (measured: a
    Monitor that lost one flush left −27 at that depth). It is read as 0; the refit does not
    use the lengths, and refusing it failed every periodic refit after the crash."""
    for kind, raw, value in rows:
        if kind not in _KIND_SET:
            continue
        shown = f"{kind} {str(raw)[:120]!r}"
        try:
            _decode(kind, raw)
        except (ValueError, TypeError, OverflowError):
            raise StoreError(f"{source}: row {shown} of {_TABLE}: key not readable by this release") from None
        if type(value) is not int or (value < 0 and kind != "session_lengths"):
            raise StoreError(
                f"{source}: row {shown} of {_TABLE}: count {value!r} is not an integer >= 0 "
                "(a damaged or hand-edited file?)"
            )


def _tables() -> dict[str, defaultdict[Any, int]]:
    return {k: defaultdict(int) for k in _KINDS}


def _most_counted(counts: Mapping[Any, int]) -> list[tuple[Any, int]]:
    """``Counter.most_common()``: by count, highest first, ties in insertion order."""
    return sorted(counts.items(), key=operator.itemgetter(1), reverse=True)


class Aggregates:
    """Thread-safe counters; optionally persisted to SQLite so a restart loses nothing recorded.

    With ``path`` set, existing totals are loaded at start and increments are written as
    deltas (``value = value + delta``) by :meth:`flush`, so several processes may share a
    file. Between flushes the unwritten deltas live in memory only.

    Args:
        path: SQLite file, or ``None`` for memory only.
        guard: caps the model and rule names kept (over the cap → ``other``), like the
            exporters' labels (share the exporters' guard); default: the default caps. Names
            already in the SQLite file are admitted first (most counted first), so a restart
            keeps counting them.
    """

    def __init__(
        self,
        path: str | None = None,
        *,
        guard: LabelGuard | None = None,
        retry_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.guard = guard if guard is not None else LabelGuard()
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()  # one connection, used by worker and closer threads
        # defaultdict(int), not Counter: Counter defines __delitem__, so every ``c[key] += n``
        # stores through a Python-level __setitem__ lookup, ~3x the cost (~20 stores per turn)
        self._totals: dict[str, defaultdict[Any, int]] = _tables()
        self._pending: dict[str, defaultdict[Any, int]] = _tables()
        self._plans: dict[tuple[Any, ...], _Plan] = {}
        """A turn shape's keys (``_plan``), at most ``PLAN_CACHE``."""
        self._path = path
        self._conn: sqlite3.Connection | None = None
        self.corrupt_rows = 0
        """Rows of the SQLite file's aggregates table that could not be read at start (skipped)."""
        self.open_error: StoreError | None = None
        """Why the SQLite file could not be opened at start (``None``: it was, or memory mode).
        Counting goes on in memory meanwhile; :meth:`flush` tries to open it again every
        ``retry_s``, then adds the file's totals and writes what was counted since."""
        self._retry_s = retry_s
        self._clock = clock
        self._closed = False
        self._next_try = 0.0
        if path is not None:
            try:
                self._attach()
            except StoreError as exc:
                self.open_error = exc
                self._next_try = clock() + retry_s
                _log.warning("handoffmon: %s; counting in memory until it opens", exc)
            self._seed_guard()

    def _attach(self) -> None:
        """Open the SQLite file and add its totals (``StoreError`` when it cannot be read)."""
        assert self._path is not None
        conn = None
        try:
            conn = _connect(self._path)
            rows = conn.execute(f"SELECT kind, key, value FROM {_TABLE}").fetchall()
        except sqlite3.Error as exc:
            if conn is not None:
                conn.close()
            raise StoreError(f"{self._path}: cannot open aggregates: {exc}") from exc
        decoded, corrupt = _decode_rows(rows, self._path)
        with self._lock:
            for kind, key, value in decoded:
                self._totals[kind][key] += value
            self.corrupt_rows += corrupt
            self._conn = conn

    def _seed_guard(self) -> None:
        """Names already persisted are admitted first (most counted first): a restart keeps them."""
        for turn, _ in _most_counted(self._totals["turns"]):
            self.guard.model(turn.model)
            self.guard.model(turn.prefix_model)
        for check, _ in _most_counted(self._totals["checks"]):
            self.guard.rule(check.rule)

    @property
    def path(self) -> str | None:
        """The SQLite file, if persisted."""
        return self._path

    def _add(self, kind: str, key: Any, n: int = 1) -> None:
        self._totals[kind][key] += n
        if self._path is not None:
            self._pending[kind][key] += n

    def add_turn(self, result: TurnResult) -> None:
        """Count one finished turn: its checks (and clean-baseline checks), transitions, turn
        cell, attributions, and its cells' depth and conversation-cluster sums."""
        ctx, cluster = result.context, result.cluster
        shape = turn_shape(result)  # the turn's keys depend only on it: built once per shape
        try:
            plan = self._plans.get(shape)
        except TypeError:  # a name or verdict that is not a string: its keys, never kept
            plan = self._plan(result, None)
        if plan is None:
            plan = self._plan(result, shape)
        turn, checks, depth_keys, cluster_keys, transitions = plan
        depth, methods, clean = ctx.depth, result.attribution_methods, result.clean
        with self._lock:
            tables = (self._totals,) if self._path is None else (self._totals, self._pending)
            for table in tables:  # straight-line updates: ~30 per turn
                table["turns"][turn] += 1
                if checks:
                    counter = table["checks"]
                    for key in checks:
                        counter[key] += 1
                    if clean:
                        counter = table["baseline_checks"]
                        for key in checks:
                            counter[key] += 1
                counter = table["cell_stats"]  # Σ depth, then the cluster sums that moved
                for cell in depth_keys:
                    counter[cell] += depth
                add_cluster_sums(counter, cluster_keys, cluster)
                counter = table["transitions"]
                for transition in transitions:
                    counter[transition] += 1
                counter = table["attributions"]
                for method in methods:
                    counter[method] += 1

    def _plan(self, result: TurnResult, shape: tuple[Any, ...] | None) -> _Plan:
        """The keys of a turn of this shape (names capped by the guard), kept for the next turns
        of the shape: the guard maps a name it has seen the same way for good (admitted:
        itself; over a cap: ``other``) and looking it up again changes nothing (an overflow
        counts at a name's first rejection), so the first turn of a shape makes every guard
        call the turn ever needs."""
        # every key is built (and its names capped) before the lock: the guard may take its own
        rec, ctx, g = result.record, result.context, self.guard
        models, hits = g.admitted()  # the guard's first step: a name found there is its label
        author_name, prefix_name = rec.author, ctx.prefix_model
        handoff = handoff_label(rec.handoff)
        author = models.get(author_name) or g.model(author_name)  # type: ignore[arg-type]
        prefix = models.get(prefix_name) or g.model(prefix_name)
        bucket = result.depth_bucket
        rules: dict[str, str] = {}

        def rule(name: str) -> str:  # one guard lookup per distinct name not yet admitted
            capped = hits.get(name) or rules.get(name)
            if capped is None:
                capped = rules[name] = g.rule(name)
            return capped

        make = tuple.__new__  # the key NamedTuples without their Python-level __new__
        turn = make(TurnKey, (author, prefix, bucket, handoff))
        found = result.checks
        labels = [rule(c.rule) for c in found]
        checks = tuple(
            make(CheckKey, (label, author, prefix, bucket, c.verdict))
            for label, c in zip(labels, found, strict=True)
        )
        # counts.turn_cell_stats(result, model=author, prefix_model=prefix, rule=rule), as keys
        depth_keys: tuple[CellStatKey, ...] = ()
        if found and in_cell(author_name, prefix_name, result.clean):  # type: ignore[arg-type]
            depth_keys = tuple(
                make(CellStatKey, (label, author, prefix, bucket, "depth"))
                for label, c in zip(labels, found, strict=True)
                if c.verdict in ("pass", "fail")
            )
        cluster_keys = []
        for step in result.cluster:
            step_rule = rule(step.rule)
            cluster_keys.append(
                tuple(
                    make(CellStatKey, (step_rule, author, prefix, CELL_TOTAL, stat)) for stat in CLUSTER_STATS
                )
            )
        transitions = tuple(
            make(TransitionKey, (rule(t.rule), author, handoff, t.from_verdict, t.to_verdict))
            for t in result.transitions
        )
        plan = (turn, checks, depth_keys, tuple(cluster_keys), transitions)
        if shape is not None:
            plans = self._plans
            if len(plans) >= PLAN_CACHE:
                plans.clear()
            plans[shape] = plan
        return plan

    def add_counts(self, counts: Counts) -> None:
        """Add a whole snapshot (seeding a file, merging another source); written by the next flush."""
        with self._lock:
            for kind in (
                "checks",
                "transitions",
                "turns",
                "attributions",
                "monitor_errors",
                "session_lengths",
                "baseline_checks",
                "cell_stats",
            ):
                for key, n in getattr(counts, kind).items():
                    if n:
                        self._add(kind, key, n)
            if counts.dropped:
                self._add("dropped", "", counts.dropped)

    def add_shadow(self, increments: Mapping[ShadowKey, int]) -> None:
        """Add one shadow pair's counter increments (``PairRecorder.add``; names already capped)."""
        with self._lock:
            for key, n in increments.items():
                if n:
                    self._add("shadow", key, n)

    def count_error(self, stage: str, n: int = 1) -> None:
        """Count handoffmon's own failure at ``stage``."""
        with self._lock:
            self._add("monitor_errors", stage, n)

    def count_dropped(self, n: int = 1) -> None:
        """Count turns dropped because the queue was full."""
        with self._lock:
            self._add("dropped", "", n)

    def count_session(self, depth: int, n: int = 1) -> None:
        """Count a finished conversation of final depth ``depth``."""
        with self._lock:
            self._add("session_lengths", int(depth), n)

    def move_session(self, old_depth: int, new_depth: int) -> None:
        """A conversation grew from ``old_depth`` (0 = new) to ``new_depth``: move its count."""
        with self._lock:
            if old_depth > 0:
                self._add("session_lengths", int(old_depth), -1)
            self._add("session_lengths", int(new_depth), 1)

    def snapshot(self) -> Counts:
        """A consistent copy of every counter (including unflushed increments)."""
        with self._lock:
            t = {k: {key: n for key, n in v.items() if n} for k, v in self._totals.items()}
        return Counts(
            checks=t["checks"],
            transitions=t["transitions"],
            turns=t["turns"],
            attributions=t["attributions"],
            monitor_errors=t["monitor_errors"],
            dropped=sum(t["dropped"].values()),
            session_lengths=t["session_lengths"],
            baseline_checks=t["baseline_checks"],
            cell_stats=t["cell_stats"],
            shadow=t["shadow"],
        )

    def flush(self, *, final: bool = False) -> None:
        """Write pending increments to SQLite (no-op in memory mode). After a failed write
        (the file locked by another process past ``LOCK_WAIT_S``, a full disk) the next is
        tried ``retry_s`` later, the increments kept pending meanwhile; ``final`` (at close)
        tries at once and waits up to ``CLOSE_LOCK_WAIT_S`` for the lock.

        Raises:
            StoreError: the write failed; the increments stay pending for the next flush.
        """
        if self._conn is not None and not final and self._clock() < self._next_try:
            return  # backing off after a failed write
        if self._conn is None:
            if self._path is None or self._closed or self._clock() < self._next_try:
                return
            self._next_try = self._clock() + self._retry_s
            try:  # the file could not be opened at start: try again (at most every retry_s)
                with self._io_lock:
                    self._attach()
            except StoreError:
                return  # counted once, at start; still counting in memory
            _log.warning("handoffmon: %s: aggregates opened, persisting again", self._path)
            self.open_error = None
        with self._lock:
            pending = self._pending
            self._pending = _tables()
        rows = [(kind, _encode(kind, key), n) for kind, c in pending.items() for key, n in c.items() if n]
        if not rows:
            return
        try:
            with self._io_lock:
                if final and self._conn is not None:
                    self._conn.execute(f"PRAGMA busy_timeout = {int(CLOSE_LOCK_WAIT_S * 1000)}")
                self._write(rows)
        except sqlite3.Error as exc:
            with self._lock:
                for kind, c in pending.items():
                    table = self._pending[kind]
                    for key, n in c.items():
                        table[key] += n
            self._next_try = self._clock() + self._retry_s
            raise StoreError(f"{self._path}: cannot persist aggregates: {exc}") from exc

    def _write(self, rows: list[tuple[str, str, int]]) -> None:
        if self._conn is None:
            raise sqlite3.ProgrammingError("aggregates are closed")
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            self._conn.executemany(
                f"INSERT INTO {_TABLE}(kind, key, value) VALUES (?, ?, ?) "
                "ON CONFLICT(kind, key) DO UPDATE SET value = value + excluded.value",
                rows,
            )
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def close(self) -> None:
        """Flush and close the SQLite connection (idempotent)."""
        if self._conn is None:
            self._closed = True
            return
        try:
            self.flush(final=True)
        finally:
            with self._io_lock:
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
                self._closed = True
