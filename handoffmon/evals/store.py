"""Eval results in SQLite: one row per (script, model, run, turn, rule), transcripts for resuming.

A turn's reply and its verdict rows are written in one transaction, so after a crash
(even SIGKILL) every turn is either fully stored or absent; a rerun rebuilds each
conversation from its stored turns and continues at the first missing one.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from handoffmon.errors import StoreError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
  id INTEGER PRIMARY KEY AUTOINCREMENT, started_at REAL NOT NULL, label TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS turns (
  script TEXT NOT NULL, model TEXT NOT NULL, run INTEGER NOT NULL, turn INTEGER NOT NULL,
  user TEXT NOT NULL, reply TEXT NOT NULL, author TEXT NOT NULL, history_tokens INTEGER NOT NULL,
  session INTEGER NOT NULL, created_at REAL NOT NULL,
  PRIMARY KEY (script, model, run, turn)
);
CREATE TABLE IF NOT EXISTS rows (
  script TEXT NOT NULL, model TEXT NOT NULL, run INTEGER NOT NULL, turn INTEGER NOT NULL,
  rule TEXT NOT NULL, verdict TEXT NOT NULL, reason TEXT NOT NULL, extracted TEXT,
  checkpoint INTEGER NOT NULL, derail INTEGER NOT NULL, author TEXT NOT NULL,
  history_tokens INTEGER NOT NULL, session INTEGER NOT NULL,
  PRIMARY KEY (script, model, run, turn, rule)
);
CREATE TABLE IF NOT EXISTS fingerprints (
  script TEXT NOT NULL, model TEXT NOT NULL, run INTEGER NOT NULL, fingerprint TEXT NOT NULL,
  PRIMARY KEY (script, model, run)
);
"""


@dataclass(frozen=True)
class Row:
    """One verdict: a rule asserted (or tracked) at one turn of one run.

    ``model`` is what the run targeted (a model or router group); ``author`` is the
    deployment that actually answered (after router fallbacks).
    """

    script: str
    model: str
    run: int
    turn: int
    rule: str
    verdict: str
    reason: str
    extracted: str | None
    checkpoint: bool
    derail: bool
    author: str
    history_tokens: int
    session: int = 0


@dataclass(frozen=True)
class StoredTurn:
    """A stored user message and reply."""

    turn: int
    user: str
    reply: str
    author: str
    history_tokens: int = 0


class ResultStore:
    """The results database (WAL). One instance per process; not shared across threads.

    Args:
        path: SQLite file (created with its tables when missing).
        label: recorded with this session (e.g. the command line).
    """

    def __init__(self, path: str | Path, *, label: str = "") -> None:
        self.path = str(path)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            cur = self._db.execute(
                "INSERT INTO sessions (started_at, label) VALUES (?, ?)", (time.time(), label)
            )
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot open eval results: {exc}") from exc
        self.session = int(cur.lastrowid or 0)

    def close(self) -> None:
        """Close the connection."""
        self._db.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stored_turns(self, script: str, model: str, run: int) -> list[StoredTurn]:
        """The turns already stored for one run, in order (contiguous from turn 1)."""
        cur = self._db.execute(
            "SELECT turn, user, reply, author, history_tokens FROM turns "
            "WHERE script=? AND model=? AND run=? ORDER BY turn",
            (script, model, run),
        )
        out: list[StoredTurn] = []
        for t, user, reply, author, tokens in cur:
            if t != len(out) + 1:
                break
            out.append(StoredTurn(t, user, reply, author, tokens))
        return out

    def verdicts(self, script: str, model: str, run: int) -> dict[int, dict[str, str | None]]:
        """turn → {rule: extracted} of the rows stored for one run (which rules have a verdict)."""
        out: dict[int, dict[str, str | None]] = {}
        cur = self._db.execute(
            "SELECT turn, rule, extracted FROM rows WHERE script=? AND model=? AND run=?",
            (script, model, run),
        )
        for t, rule, extracted in cur:
            out.setdefault(t, {})[rule] = extracted
        return out

    def add_rows(self, rows: Sequence[Row]) -> None:
        """Store verdict rows of turns already stored (a row already there is left as it was)."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            self._insert_rows(rows)
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            self._db.execute("ROLLBACK")
            raise StoreError(f"{self.path}: cannot store rows: {exc}") from exc

    @staticmethod
    def _utf8(text: str | None) -> str | None:
        """``text`` as SQLite can hold it: a lone surrogate (a provider's JSON ``"\\ud800"``)
        spelled as its escape; its INSERT raised UnicodeEncodeError and failed the run."""
        if text is None:
            return None
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return text.encode("utf-8", "backslashreplace").decode("utf-8")
        return text

    def _insert_rows(self, rows: Sequence[Row]) -> None:
        self._db.executemany(
            "INSERT OR IGNORE INTO rows VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [
                (
                    r.script,
                    r.model,
                    r.run,
                    r.turn,
                    r.rule,
                    r.verdict,
                    self._utf8(r.reason),
                    self._utf8(r.extracted),
                    int(r.checkpoint),
                    int(r.derail),
                    r.author,
                    r.history_tokens,
                    self.session,
                )
                for r in rows
            ],
        )

    def fingerprint(self, script: str, model: str, run: int) -> dict[str, Any] | None:
        """What produced the stored turns of one run (seed, deployment, names); None if not recorded."""
        row = self._db.execute(
            "SELECT fingerprint FROM fingerprints WHERE script=? AND model=? AND run=?", (script, model, run)
        ).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def runs_with_turns(self, model: str) -> set[tuple[str, int]]:
        """(script, run) of every run of ``model`` with stored turns (``stored_turns`` not empty)."""
        cur = self._db.execute("SELECT script, run FROM turns WHERE model=? AND turn=1", (model,))
        return {(s, int(r)) for s, r in cur}

    def fingerprints(self, model: str) -> dict[tuple[str, int], dict[str, Any]]:
        """(script, run) → recorded fingerprint of every run of ``model`` that has one."""
        cur = self._db.execute("SELECT script, run, fingerprint FROM fingerprints WHERE model=?", (model,))
        return {(s, int(r)): dict(json.loads(f)) for s, r, f in cur}

    def set_fingerprints(
        self, model: str, runs: Sequence[tuple[str, int]], fingerprint: Mapping[str, Any]
    ) -> None:
        """Record one fingerprint for many runs of ``model`` in one transaction (replacing older records)."""
        text = json.dumps(dict(fingerprint), sort_keys=True)
        try:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany(
                "INSERT OR REPLACE INTO fingerprints VALUES (?,?,?,?)",
                [(script, model, run, text) for script, run in runs],
            )
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            self._db.execute("ROLLBACK")
            raise StoreError(f"{self.path}: cannot store fingerprints: {exc}") from exc

    def discard_run(self, script: str, model: str, run: int) -> int:
        """Delete one run's turns, rows and fingerprint (atomically); returns the turns deleted."""
        key = (script, model, run)
        where = "WHERE script=? AND model=? AND run=?"
        try:
            self._db.execute("BEGIN IMMEDIATE")
            n = self._db.execute(f"DELETE FROM turns {where}", key).rowcount
            self._db.execute(f"DELETE FROM rows {where}", key)
            self._db.execute(f"DELETE FROM fingerprints {where}", key)
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            self._db.execute("ROLLBACK")
            raise StoreError(f"{self.path}: cannot discard {script}#{run} of {model}: {exc}") from exc
        return int(n)

    def last_extracted(self, script: str, model: str, run: int, turn: int) -> dict[str, str]:
        """rule → extracted value at ``turn`` (the state a stateful checker carries on)."""
        cur = self._db.execute(
            "SELECT rule, extracted FROM rows WHERE script=? AND model=? AND run=? AND turn=? "
            "AND extracted IS NOT NULL",
            (script, model, run, turn),
        )
        return {r: e for r, e in cur}

    def add_turn(
        self, turn: StoredTurn, script: str, model: str, run: int, history_tokens: int, rows: Sequence[Row]
    ) -> None:
        """Store one reply and its rows atomically (a turn already stored is left as it was)."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            cur = self._db.execute(
                "INSERT OR IGNORE INTO turns VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    script,
                    model,
                    run,
                    turn.turn,
                    self._utf8(turn.user),
                    self._utf8(turn.reply),
                    turn.author,
                    history_tokens,
                    self.session,
                    time.time(),
                ),
            )
            if cur.rowcount:
                self._insert_rows(rows)
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            self._db.execute("ROLLBACK")
            raise StoreError(f"{self.path}: cannot store turn: {exc}") from exc
        except BaseException:  # not left open: the next turn's BEGIN would fail
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise

    def rows(
        self, *, script: str | None = None, model: str | None = None, checkpoints_only: bool = False
    ) -> Iterator[Row]:
        """Stored rows, ordered by script, model, run, turn, rule."""
        where, args = [], []
        for col, val in (("script", script), ("model", model)):
            if val is not None:
                where.append(f"{col}=?")
                args.append(val)
        if checkpoints_only:
            where.append("checkpoint=1")
        sql = "SELECT * FROM rows" + (" WHERE " + " AND ".join(where) if where else "")
        for r in self._db.execute(sql + " ORDER BY script, model, run, turn, rule", args):
            yield Row(
                r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], bool(r[8]), bool(r[9]), r[10], r[11], r[12]
            )

    def count(self, table: str = "rows", *, session: int | None = None) -> int:
        """Rows (or turns) stored, optionally only those written by one session."""
        if table not in ("rows", "turns"):
            raise ValueError(table)
        if session is None:
            return int(self._db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
        return int(
            self._db.execute(f"SELECT COUNT(*) FROM {table} WHERE session=?", (session,)).fetchone()[0]
        )

    def write_jsonl(self, fh: TextIO) -> int:
        """Write every row to ``fh`` as one JSON object per line; returns the number written."""
        n = 0
        for row in self.rows():
            fh.write(json.dumps(asdict(row), ensure_ascii=False) + "\n")
            n += 1
        return n

    def export_jsonl(self, path: str | Path) -> int:
        """Write every row as one JSON object per line (atomic); returns the number written.

        The rows stream through a temp file of this process's own beside ``path``, renamed
        over it when complete: an error part way leaves the previous file whole and no temp file.
        """
        target = Path(path)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            with tmp.open("x", encoding="utf-8", errors="backslashreplace") as fh:
                n = self.write_jsonl(fh)
            tmp.replace(target)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        return n
