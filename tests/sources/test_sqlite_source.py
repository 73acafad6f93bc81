"""The SQLite source against damaged files: a real store file written by a real ``Monitor``
(the live pipeline, ``sim.live``), then edited the way a hand or a crash would, refitted through
``handoffmon refit``. A file no conversations can give is refused naming the cell; nothing is
refitted with counters quietly missing."""

from __future__ import annotations

import json
import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from handoffmon.cli import main
from handoffmon.counts import CELL_TOTAL
from handoffmon.depth import DepthBuckets
from handoffmon.errors import StoreError
from handoffmon.pipeline.monitor import Monitor
from handoffmon.sim.calibration import standard_population
from handoffmon.sim.live import live_config, replay
from handoffmon.sim.population import simulate
from handoffmon.sources.sqlite import read_sqlite
from handoffmon.stores.memory import MemoryStore


@pytest.fixture(scope="module")
def store_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite aggregates file of 60 clustered conversations through a real Monitor."""
    rows = simulate(replace(standard_population(rules=1), not_applicable_rate=0.0), 60, seed=12)
    db = tmp_path_factory.mktemp("sqlite-source") / "hm.sqlite"
    config = live_config(rows, DepthBuckets(), store={"backend": "sqlite", "path": str(db)})
    with Monitor(config, store=MemoryStore()) as monitor:
        replay(rows, monitor)
    return db


@pytest.fixture
def db(store_file: Path, tmp_path: Path) -> Path:
    """A copy of the store file a test may damage."""
    copy = tmp_path / "hm.sqlite"
    shutil.copy(store_file, copy)
    return copy


def _refit(db: Path) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, ["refit", "--source", f"sqlite://{db}", "--out", "-", "--min-n", "5"])
    return res.exit_code, res.stdout, res.stderr


def _handoff_cell(db: Path) -> tuple[str, str, str]:
    """(rule, model, prefix) of the handoff cell with the most conversations."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT key, value FROM handoffmon_counts WHERE kind = 'cell_stats' ORDER BY value DESC"
        ).fetchall()
    for raw, _ in rows:
        rule, model, prefix, bucket, stat = json.loads(raw)
        if (
            stat == "conversations"
            and bucket == CELL_TOTAL
            and rule != "all"
            and prefix not in (model, "none")
        ):
            return rule, model, prefix
    raise AssertionError("no handoff cell")


def _set(db: Path, cell: tuple[str, str, str], stat: str, value: object) -> None:
    key = json.dumps([*cell, CELL_TOTAL, stat], separators=(",", ":"))
    with sqlite3.connect(db) as conn:
        if value is None:
            done = conn.execute("DELETE FROM handoffmon_counts WHERE kind = 'cell_stats' AND key = ?", (key,))
        else:
            done = conn.execute(
                "UPDATE handoffmon_counts SET value = ? WHERE kind = 'cell_stats' AND key = ?", (value, key)
            )
        assert done.rowcount == 1


def test_intact_store_file_refits_clustered_with_nothing_repaired(db: Path) -> None:
    code, out, err = _refit(db)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["clustered"] is True and doc["input_repaired_cells"] == 0 and doc["input_repairs"] == []


@pytest.mark.parametrize(
    ("stat", "value", "relation"),
    [
        ("n2", 0, "checks <= n2"),  # hand-edited
        ("conversations", None, "conversations >= 1"),  # one row lost: read as unclustered before
        ("y2", 10**9, "y2 <= yn"),
    ],
)
def test_a_damaged_cell_is_refused_naming_file_cell_and_relation(
    db: Path, stat: str, value: object, relation: str
) -> None:
    rule, model, prefix = cell = _handoff_cell(db)
    _set(db, cell, stat, value)
    code, out, err = _refit(db)
    assert code == 1 and out == ""
    assert f"sqlite://{db}: cell {rule} {prefix}->{model}:" in err and relation in err


SET = (
    "UPDATE handoffmon_counts SET value = {} "
    "WHERE rowid = (SELECT min(rowid) FROM handoffmon_counts WHERE kind = '{}')"
)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("INSERT INTO handoffmon_counts VALUES ('checks', 'not json', 3)", "key not readable"),
        (SET.format("-4", "checks"), "count -4 is not an integer >= 0"),
        (SET.format("'lots'", "turns"), "count 'lots' is not an integer"),
        (SET.format("2.5", "cell_stats"), "count 2.5 is not an integer"),
    ],
)  # fmt: skip
def test_unreadable_rows_are_an_error_for_the_refit(db: Path, sql: str, message: str) -> None:
    """The monitor skips such rows to start; the refit's reader refuses them (a lost row of
    checks or sums would shift every interval)."""
    with sqlite3.connect(db) as conn:
        conn.execute(sql)
    with pytest.raises(StoreError, match=message):
        read_sqlite(db)
    code, _, err = _refit(db)
    assert code == 1 and message in err


def test_truncated_and_foreign_files_are_errors_and_an_empty_store_is_no_data(
    db: Path, tmp_path: Path
) -> None:
    """A file cut in half (a copy interrupted) is an error, a SQLite file without handoffmon's
    table is one, and a store with no rows exits 4 (no data), never a refit of nothing."""
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = db.stat().st_size
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(db.read_bytes()[: size // 2])
    code, out, err = _refit(cut)
    assert code == 1 and out == "" and "cut.sqlite" in err
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    code, _, err = _refit(other)
    assert code == 1 and "no such table: handoffmon_counts" in err
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM handoffmon_counts")
    code, out, err = _refit(db)
    assert code == 4 and out == "" and "no checks to refit" in err
