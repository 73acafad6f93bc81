"""The SQLite source against damaged files: a real store file written by a real ``Monitor``
(the live pipeline, ``sim.live``), then edited the way a hand or a crash would, refitted through
``handoffmon refit``. A row it cannot read is refused; a cell whose cluster sums no
conversations can give (which a worker's crash leaves behind: ``tests/refit/test_torn_sqlite.py``)
is read as one conversation and listed, naming the cell; nothing is refitted with counters
quietly missing."""

from __future__ import annotations

import json
import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from handoffmon.cli import main
from handoffmon.counts import CELL_TOTAL, SHADOW_TABLE
from handoffmon.depth import DepthBuckets
from handoffmon.errors import StoreError
from handoffmon.pipeline.monitor import Monitor
from handoffmon.sim.calibration import standard_population
from handoffmon.sim.live import live_config, replay
from handoffmon.sim.population import simulate
from handoffmon.sim.shadow_arm import shadow_counts, simulate_shadowed
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
    _set_row(db, "cell_stats", [*cell, CELL_TOTAL, stat], value)


def _set_row(db: Path, kind: str, key: list[str], value: object) -> None:
    """Set (None: delete) the count of one row, as a hand or a lost row would."""
    raw = json.dumps(key, separators=(",", ":"))
    with sqlite3.connect(db) as conn:
        if value is None:
            done = conn.execute("DELETE FROM handoffmon_counts WHERE kind = ? AND key = ?", (kind, raw))
        else:
            done = conn.execute(
                "UPDATE handoffmon_counts SET value = ? WHERE kind = ? AND key = ?", (value, kind, raw)
            )
        assert done.rowcount == 1, raw


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
def test_a_damaged_cell_is_repaired_and_listed_naming_file_cell_and_relation(
    db: Path, stat: str, value: object, relation: str
) -> None:
    """Checked at the exact slack, repaired rather than refused: a crash tears small cells of a
    SQLite file for good, and refusing them failed every refit after it."""
    rule, model, prefix = cell = _handoff_cell(db)
    _set(db, cell, stat, value)
    code, out, err = _refit(db)
    assert code == 0, err
    doc = json.loads(out)
    listed = [
        r for r in doc["input_repairs"] if (r["rule"], r["prefix_model"], r["model"]) == (rule, prefix, model)
    ]
    assert doc["input_repaired_cells"] >= 1 and len(listed) == 1 and relation in listed[0]["violated"]
    assert listed[0]["action"] == "one_conversation"
    assert f"{rule} {prefix}->{model}" in err and relation in err


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


@pytest.fixture(scope="module")
def shadow_store_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite aggregates file of 60 clustered conversations through a real Monitor, half their
    deep turns shadowed: the pairs counted through ``Monitor.count_shadow`` (the recorder's
    increments: ``shadow_counts`` equals them key for key, ``tests/shadow/test_recorder.py``)."""
    pop = replace(standard_population(rules=1), not_applicable_rate=0.0)
    rows, pairs = simulate_shadowed(pop, 60, rate=0.5, seed=12)
    db = tmp_path_factory.mktemp("sqlite-shadow") / "hm.sqlite"
    config = live_config(rows, DepthBuckets(), store={"backend": "sqlite", "path": str(db)})
    with Monitor(config, store=MemoryStore()) as monitor:
        replay(rows, monitor)
        monitor.count_shadow(shadow_counts(pairs))
    return db


def shadow_cell(db: Path) -> tuple[str, str, str]:
    """(rule, A, B) of the per-rule shadow cell with the most pairs."""
    pairs: dict[tuple[str, str, str], int] = {}
    for key, value in read_sqlite(db).shadow.items():
        if key.stat in SHADOW_TABLE and key.rule != "all":
            pairs[key[:3]] = pairs.get(key[:3], 0) + value
    return max(pairs, key=lambda cell: (pairs[cell], cell))


def set_shadow(db: Path, cell: tuple[str, str, str], stat: str, value: int | None) -> None:
    _set_row(db, "shadow", [*cell, stat], value)


@pytest.fixture
def shadow_db(shadow_store_file: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "shadow.sqlite"
    shutil.copy(shadow_store_file, copy)
    return copy


def test_intact_shadow_store_file_refits_its_switch_costs_with_nothing_refused(shadow_db: Path) -> None:
    code, out, err = _refit(shadow_db)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["shadow_input_repaired_cells"] == 0 and doc["input_repaired_cells"] == 0
    rule, a, b = shadow_cell(shadow_db)
    assert any((s["prefix_model"], s["model"]) == (a, b) for s in doc["rules"][rule]["switch_costs"])


@pytest.mark.parametrize(
    ("stat", "value", "relation"),
    [
        ("conversations", None, "conversations >= 1"),  # one row lost: read as independent pairs
        ("n2", 0, "pairs <= n2"),  # hand-edited
        ("bc", 10**6, "b2 + 2bc + c2 <= bn + cn"),
    ],
)
def test_a_damaged_shadow_cell_is_repaired_and_listed_naming_file_pair_and_relation(
    shadow_db: Path, stat: str, value: int | None, relation: str
) -> None:
    rule, a, b = cell = shadow_cell(shadow_db)
    set_shadow(shadow_db, cell, stat, value)
    code, out, err = _refit(shadow_db)
    assert code == 0, err
    doc = json.loads(out)
    listed = [
        r for r in doc["shadow_input_repairs"] if (r["rule"], r["prefix_model"], r["model"]) == (rule, a, b)
    ]
    assert doc["shadow_input_repaired_cells"] >= 1 and len(listed) == 1 and relation in listed[0]["violated"]
    assert f"{rule} {a}->{b}" in err and relation in err


@pytest.mark.parametrize("damaged", ["shadow", "cell"])
def test_the_periodic_refit_of_a_damaged_file_repairs_and_lists_it_as_the_cli_does(
    damaged: str, shadow_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One policy for one file: the in-process refit of workers sharing the SQLite store
    (``PROMETHEUS_MULTIPROC_DIR``) reads it as exact, like ``handoffmon refit``, and both repair
    a damaged shadow cell or cell and list it (RefitInputRepaired reads the count). It had failed
    the run (RefitFailing, nothing published) for as long as the cell stayed broken, which after
    a worker's crash is for good (``tests/refit/test_torn_sqlite.py``)."""
    from handoffmon.runtime import build_runtime
    from tests.pipeline.helpers import make_config

    where = tmp_path / "multiproc"
    where.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(where))
    config = make_config(
        refit={"interval_s": 60, "min_n": 5}, store={"backend": "sqlite", "path": str(shadow_db)}
    )
    if damaged == "shadow":
        rule, prefix, model = shadow_cell(shadow_db)
        relation = "conversations >= 1"
    else:
        rule, model, prefix = _handoff_cell(shadow_db)
        relation = "checks <= n2"
    with build_runtime(config, registry=None, start=False) as rt:
        assert rt.refit is not None and rt.refit.exact and rt.refit.repair
        healthy = rt.refit_now()
        assert healthy is not None and healthy.source == "sqlite" and healthy.shadow_input_repaired_cells == 0
        assert healthy.input_repaired_cells == 0
        if damaged == "shadow":
            set_shadow(shadow_db, (rule, prefix, model), "conversations", None)
        else:
            _set(shadow_db, (rule, model, prefix), "n2", 0)
        result = rt.refit_now()
        assert result is not None
        stats = rt.refit.stats
        assert (stats.runs, stats.failures, stats.last_success_at) == (2, 0, result.created_at)
        repairs = result.shadow_input_repairs if damaged == "shadow" else result.input_repairs
        listed = [r for r in repairs if (r.rule, r.prefix_model, r.model) == (rule, prefix, model)]
        assert len(listed) == 1 and relation in listed[0].violated
        assert (
            result.shadow_input_repaired_cells if damaged == "shadow" else result.input_repaired_cells
        ) >= 1
        assert "refit" not in rt.monitor.aggregates.snapshot().monitor_errors
    code, out, err = _refit(shadow_db)
    assert code == 0 and f"{rule} {prefix}->{model}" in err and relation in err
    doc = json.loads(out)
    key = "shadow_input_repairs" if damaged == "shadow" else "input_repairs"
    assert [(r["rule"], r["prefix_model"], r["model"]) for r in doc[key]] == [
        (r.rule, r.prefix_model, r.model) for r in repairs
    ]


def test_the_periodic_refit_reads_the_file_strictly_as_the_cli_does(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row this release cannot read fails the in-process run (counted) instead of being skipped
    there while ``handoffmon refit`` refuses the file: a lost row of checks or sums shifts every
    interval."""
    from handoffmon.runtime import build_runtime
    from tests.pipeline.helpers import make_config

    where = tmp_path / "multiproc"
    where.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(where))
    config = make_config(refit={"interval_s": 60, "min_n": 5}, store={"backend": "sqlite", "path": str(db)})
    with build_runtime(config, registry=None, start=False) as rt:
        assert rt.refit is not None and rt.refit_now() is not None
        with sqlite3.connect(db) as conn:
            conn.execute("INSERT INTO handoffmon_counts VALUES ('checks', 'not json', 3)")
        assert rt.refit_now() is None
        assert rt.refit.stats.failures == 1 and "key not readable" in (rt.refit.stats.last_error or "")
