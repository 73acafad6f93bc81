"""SQLite attribution store: one embedded file in WAL mode, safe across threads and processes."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

from handoffmon.errors import CorruptValue, StoreError, StoreTimeout
from handoffmon.protocols import Authorship
from handoffmon.stores._rev import stored_rev
from handoffmon.stores._text import is_utf8

_SCHEMA = """
CREATE TABLE IF NOT EXISTS handoffmon_attribution (
    key TEXT PRIMARY KEY,
    authors TEXT NOT NULL,
    depth INTEGER NOT NULL,
    created_at REAL NOT NULL,
    conversation_id TEXT NOT NULL,
    expires_at REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS handoffmon_attribution_expiry ON handoffmon_attribution (expires_at);
CREATE TABLE IF NOT EXISTS handoffmon_conversation_state (
    conversation_id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    expires_at REAL NOT NULL
) WITHOUT ROWID;
"""
_STATE_EXPIRY_INDEX = """
CREATE INDEX IF NOT EXISTS handoffmon_conversation_state_expiry
    ON handoffmon_conversation_state (expires_at)
"""
"""The purge's index on state expiry (files written before it lacked it: the state purge
scanned the whole table). Best effort: a file that cannot take it (read-only) still opens."""
_CHUNK = 500  # bound on SQL variables per statement (SQLite's default limit is 999+)

PURGE_BATCH = 10_000
"""Expired rows of each table one write's purge deletes at most (the next write goes on while
more remain). One ``DELETE`` of every expired row held the write lock ~1 s per million rows
(after days stopped, or a shorter ``store.ttl_s``), past other processes' busy timeout; a
batch of this many takes ~10 ms."""


class MissingDirectory(StoreError):
    """The database file's directory does not exist (or is not a directory): a typo in
    ``store.path`` far more often than a directory to create, so the store is not built (the
    runtime reports it as a ``ConfigError`` naming ``store.path`` and the config file)."""

    def __init__(self, path: Path) -> None:
        parent = path.parent
        what = "is not a directory" if parent.exists() else "does not exist"
        super().__init__(f"directory {str(parent)!r} of the SQLite file {path.name!r} {what} (not created)")


class NotAFile(StoreError):
    """``store.path`` names something that exists but is no regular file: a directory (the
    directory meant to hold the file), a device. It can never open, so the store is not built
    (the runtime reports it as a ``ConfigError`` naming ``store.path`` and the config file)
    rather than starting degraded for ever."""

    def __init__(self, path: Path) -> None:
        if path.is_dir():
            what = f"is a directory: name a file in it (e.g. {str(path / 'handoffmon.db')!r})"
        else:
            what = "exists but is not a regular file"
        super().__init__(f"the SQLite file {str(path)!r} {what}")


def _text(value: str) -> str | bytes:
    """A text parameter as SQLite can take it: itself, or, when it holds a lone surrogate (a
    caller's conversation id ``"\\ud800"`` decoded from JSON), its ``surrogatepass`` UTF-8
    bytes, stored as a BLOB. A BLOB never equals a TEXT value, so such an id cannot meet
    another one. (Before, ``sqlite3`` raised ``UnicodeEncodeError`` for it: every call of
    that conversation failed, three in a row paused the store for every conversation.)"""
    return value if is_utf8(value) else value.encode("utf-8", "surrogatepass")


def _untext(value: str | bytes) -> str:
    """Inverse of :func:`_text` for a value read back."""
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else str(value)


def _authorship(authors: str, depth: int, created_at: float, cid: str) -> Authorship:
    """A stored row as ``Authorship``; ``ValueError``/``TypeError`` when it cannot be read."""
    names = json.loads(authors)
    if not isinstance(names, list):
        raise ValueError("authors is not a list")
    return Authorship(tuple(str(a) for a in names), int(depth), float(created_at), str(cid))


def _state_or_rev(raw: str | None) -> Mapping[str, object] | None:
    """A stored state blob as a mapping; an unreadable one as just its revision."""
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"rev": stored_rev(raw)}


def _state_blob(state: Mapping[str, object]) -> str:
    """A conversation state as its stored JSON blob.

    Raises:
        StoreError: the state is not JSON-serializable.
    """
    try:
        return json.dumps(dict(state), separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise StoreError(f"conversation state is not JSON-serializable: {exc}") from exc


def _select_state(cur: sqlite3.Cursor, conversation_id: str, now: float) -> str | None:
    """The stored state blob of a conversation, or ``None`` when missing or expired at ``now``."""
    cur.execute(
        "SELECT state FROM handoffmon_conversation_state WHERE conversation_id = ? AND expires_at > ?",
        (_text(conversation_id), now),
    )
    row = cur.fetchone()
    return None if row is None else row[0]


_stores: weakref.WeakSet[SQLiteStore] = weakref.WeakSet()
_inherited: list[sqlite3.Connection] = []
"""Connections a forked child inherited, kept open and never used: SQLite forbids using a
connection across ``fork`` (its locks are the parent's), and closing it in the child would
run SQLite's close on the parent's file descriptors and lock state."""


def _after_fork_in_child() -> None:
    """Every store forgets the parent's connections (each thread of the child opens its own)."""
    for store in list(_stores):
        store._forget_connections()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class SQLiteStore:
    """``AttributionStore`` in a SQLite file that survives restarts.

    One connection per thread; WAL journaling lets readers in other processes proceed
    while one writes; ``busy_timeout_s`` absorbs writer contention. Rows carry an expiry
    (``ttl_s`` after the write); expired rows are ignored on read and purged every
    ``purge_every_s``. Every ``sqlite3`` failure is raised as ``StoreError``
    (``StoreTimeout`` when the database stayed locked, ``CorruptValue`` for rows that
    cannot be decoded).

    Args:
        path: database file (created when missing, in a directory that must exist: a missing
            directory is a ``MissingDirectory`` at once, not created; a directory or device
            there a ``NotAFile``).
        ttl_s: expiry after the last write.
        clock: wall clock (tests pass a fake).
        busy_timeout_s: how long a write waits for another writer's lock.
        purge_every_s: interval between purges of expired rows (on writes).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        ttl_s: float = 7 * 24 * 3600,
        clock: Callable[[], float] = time.time,
        busy_timeout_s: float = 5.0,
        purge_every_s: float = 60.0,
    ) -> None:
        self.path = Path(path)
        self.ttl_s = ttl_s
        self._clock = clock
        self._busy_ms = int(busy_timeout_s * 1000)
        self._purge_every_s = purge_every_s
        self._next_purge = 0.0
        self._local = threading.local()
        self._all: dict[threading.Thread, sqlite3.Connection] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._open = False
        if not self.path.parent.is_dir():
            raise MissingDirectory(self.path)
        if self.path.exists() and not self.path.is_file():
            raise NotAFile(self.path)
        _stores.add(self)
        self.open_error: StoreError | None = None
        """Why the file could not be opened at start (``None``: it was). The store still starts:
        every call tries to open it again and fails with ``StoreError`` until it can (the store
        guard backs off between tries), so a corrupt or read-only file degrades monitoring
        (attribution unknown) instead of stopping the application."""
        try:
            self._ensure_open()
        except StoreError as exc:
            self.open_error = exc

    def _ensure_open(self) -> None:
        """Create the tables once (``StoreError`` until that succeeds)."""
        if self._open:
            return
        with self._cursor(opening=True) as cur:
            cur.executescript(_SCHEMA)
        with suppress(StoreError), self._cursor(opening=True) as cur:
            cur.execute(_STATE_EXPIRY_INDEX)
        self._open = True
        self.open_error = None

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise StoreError(f"SQLite store {self.path} is closed")
            conn = sqlite3.connect(
                self.path, timeout=self._busy_ms / 1000, isolation_level=None, check_same_thread=False
            )
            try:
                conn.execute(f"PRAGMA busy_timeout={self._busy_ms}")
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error:  # not a database, read-only, ...: no connection kept
                conn.close()
                raise
            self._local.conn = conn
            with self._lock:
                self._prune_dead_threads()
                self._all[threading.current_thread()] = conn
        return conn

    def _forget_connections(self) -> None:
        """In a forked child: the parent's connections set aside (``_inherited``), the lock new."""
        self._lock = threading.Lock()
        main: sqlite3.Connection | None = getattr(self._local, "conn", None)
        _inherited.extend(self._all.values())
        if main is not None and main not in self._all.values():
            _inherited.append(main)
        self._all = {}
        self._local = threading.local()

    def _prune_dead_threads(self) -> None:
        """Close connections of threads that ended (lock held), so thread churn cannot leak them."""
        for thread in [t for t in self._all if not t.is_alive()]:
            with suppress(sqlite3.Error):
                self._all.pop(thread).close()

    @contextmanager
    def _cursor(self, write: bool = False, opening: bool = False) -> Iterator[sqlite3.Cursor]:
        if not opening:
            self._ensure_open()
        try:
            conn = self._connection()
            cur = conn.cursor()
            if write:
                cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
                if write:
                    cur.execute("COMMIT")
            except BaseException:
                if write and conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            finally:
                cur.close()
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise StoreTimeout(f"SQLite store {self.path}: {exc}") from exc
            raise StoreError(f"SQLite store {self.path}: {exc}") from exc
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store {self.path}: {exc}") from exc

    def get_many(self, keys: Sequence[str]) -> list[Authorship | None]:
        """Look up keys; expired rows read as ``None``.

        Raises:
            CorruptValue: some rows could not be decoded (``partial`` has them as ``None``).
            StoreTimeout: the database stayed locked past ``busy_timeout_s``.
            StoreError: any other SQLite failure.
        """
        now = self._clock()
        rows: dict[str, Authorship] = {}
        bad = 0
        with self._cursor() as cur:
            for start in range(0, len(keys), _CHUNK):
                chunk = [_text(k) for k in keys[start : start + _CHUNK]]
                marks = ",".join("?" * len(chunk))
                cur.execute(
                    "SELECT key, authors, depth, created_at, conversation_id FROM handoffmon_attribution"
                    f" WHERE key IN ({marks}) AND expires_at > ?",
                    (*chunk, now),
                )
                for key, authors, depth, created_at, cid in cur.fetchall():
                    try:
                        names = json.loads(authors)
                        if not isinstance(names, list):
                            raise ValueError("authors is not a list")
                        rows[_untext(key)] = Authorship(
                            tuple(str(a) for a in names), int(depth), float(created_at), _untext(cid)
                        )
                    except (ValueError, TypeError):
                        bad += 1
        found = [rows.get(k) for k in keys]
        if bad:
            raise CorruptValue(f"SQLite store {self.path}: {bad} unreadable attribution rows", partial=found)
        return found

    def put_many(self, items: Sequence[tuple[str, Authorship]]) -> None:
        """Record keys (overwriting) in one transaction."""
        if not items:
            return
        now = self._clock()
        expires = now + self.ttl_s
        rows = [
            (_text(k), json.dumps(list(a.authors)), a.depth, a.created_at, _text(a.conversation_id), expires)
            for k, a in items
        ]
        with self._cursor(write=True) as cur:
            cur.executemany("INSERT OR REPLACE INTO handoffmon_attribution VALUES (?, ?, ?, ?, ?, ?)", rows)
            self._maybe_purge(cur, now)

    def get_state(self, conversation_id: str) -> Mapping[str, object] | None:
        """The conversation's state, or ``None`` when missing or expired."""
        with self._cursor() as cur:
            raw = _select_state(cur, conversation_id, self._clock())
        if raw is None:
            return None
        try:
            value = json.loads(raw)
        except ValueError as exc:
            raise CorruptValue(f"SQLite store {self.path}: unreadable conversation state") from exc
        if not isinstance(value, dict):
            raise CorruptValue(f"SQLite store {self.path}: conversation state is not a mapping")
        return value

    def put_state(self, conversation_id: str, state: Mapping[str, object]) -> None:
        """Replace the conversation's state (must be JSON-serializable)."""
        blob = _state_blob(state)
        now = self._clock()
        with self._cursor(write=True) as cur:
            cur.execute(
                "INSERT OR REPLACE INTO handoffmon_conversation_state VALUES (?, ?, ?)",
                (_text(conversation_id), blob, now + self.ttl_s),
            )
            self._maybe_purge(cur, now)

    native_cas = True
    """``put_states_if`` writes states compare-and-set (the check stage folds again on conflict)."""

    def put_states_if(
        self, states: Sequence[tuple[str, Mapping[str, object], int]]
    ) -> dict[str, Mapping[str, object] | None]:
        """Write each ``(conversation_id, state, rev)`` only while the stored state (an expired
        one reads as missing) still has revision ``rev`` (``state`` carries ``rev + 1``): read
        and write in one ``BEGIN IMMEDIATE`` transaction, so processes sharing the file cannot
        overwrite each other's fold.

        Returns:
            The conversations not written, with the state stored now (``None``: missing or
            unreadable) for the caller to fold its turns on again.
        """
        if not states:
            return {}
        blobs = [(cid, _state_blob(state), rev) for cid, state, rev in states]
        now = self._clock()
        conflicts: dict[str, Mapping[str, object] | None] = {}
        with self._cursor(write=True) as cur:
            for conversation_id, blob, rev in blobs:
                stored = _select_state(cur, conversation_id, now)
                if stored_rev(stored) != rev:
                    conflicts[conversation_id] = _state_or_rev(stored)
                    continue
                cur.execute(
                    "INSERT OR REPLACE INTO handoffmon_conversation_state VALUES (?, ?, ?)",
                    (_text(conversation_id), blob, now + self.ttl_s),
                )
            self._maybe_purge(cur, now)
        return conflicts

    def ping(self) -> bool:
        """Whether the file opens and answers now (for readiness probes); never raises."""
        try:
            with self._cursor() as cur:
                cur.execute("SELECT 1 FROM handoffmon_conversation_state LIMIT 1")
        except StoreError:
            return False
        return True

    def purge(self) -> int:
        """Delete expired rows now, :data:`PURGE_BATCH` per table and transaction; returns how
        many went."""
        total = 0
        while True:
            with self._cursor(write=True) as cur:
                n, more = self._purge(cur, self._clock())
            total += n
            if not more:
                return total

    def _maybe_purge(self, cur: sqlite3.Cursor, now: float) -> None:
        if now >= self._next_purge:
            self._next_purge = now + self._purge_every_s  # a purge that fails waits its turn
            if self._purge(cur, now)[1]:
                self._next_purge = now  # more expired rows: the next write goes on

    @staticmethod
    def _purge(cur: sqlite3.Cursor, now: float) -> tuple[int, bool]:
        """Delete up to :data:`PURGE_BATCH` expired rows of each table; (how many, whether
        expired rows may remain)."""
        n, more = 0, False
        for table, key in (
            ("handoffmon_attribution", "key"),
            ("handoffmon_conversation_state", "conversation_id"),
        ):
            cur.execute(
                f"DELETE FROM {table} WHERE {key} IN"
                f" (SELECT {key} FROM {table} WHERE expires_at <= ? LIMIT ?)",
                (now, PURGE_BATCH),
            )
            n += cur.rowcount
            more = more or cur.rowcount >= PURGE_BATCH
        return n, more

    def close(self) -> None:
        """Close every thread's connection (idempotent)."""
        with self._lock:
            self._closed = True
            conns, self._all = list(self._all.values()), {}
        for conn in conns:
            with suppress(sqlite3.Error):
                conn.close()
        self._local = threading.local()
