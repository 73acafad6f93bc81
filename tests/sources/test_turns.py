"""Turn-log source: DuckDB SQL equals the numpy reference; JSONL, CSV and Parquet agree; bad rows named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from handoffmon.errors import InputError, NoDataError
from handoffmon.sim.calibration import standard_population
from handoffmon.sim.counting import counts_from_rows
from handoffmon.sim.population import simulate
from handoffmon.sources.spec import load_source
from handoffmon.sources.turns import COLUMNS, aggregation_sql, read_turns

pytest.importorskip("duckdb")

GOOD = json.dumps(
    {"conversation_id": "c", "depth": 1, "model": "a", "prefix_model": "none", "rule": "r", "verdict": "pass"}
)


@pytest.fixture(scope="module")
def logs(tmp_path_factory):  # type: ignore[no-untyped-def]
    rows = simulate(standard_population(rules=2), 400, seed=3)
    tmp = tmp_path_factory.mktemp("turns")
    records = rows.records()
    jsonl = tmp / "turns.jsonl"
    jsonl.write_text("".join(json.dumps({**r, "latency_ms": 12}) + "\n" for r in records))
    csv = tmp / "turns.csv"
    csv.write_text(
        ",".join(COLUMNS) + "\n" + "".join(",".join(str(r[c]) for c in COLUMNS) + "\n" for r in records)
    )
    import duckdb

    parquet = tmp / "turns.parquet"
    duckdb.sql(
        f"COPY (SELECT * FROM read_json('{jsonl}', format='newline_delimited')) "
        f"TO '{parquet}' (FORMAT parquet)"
    )
    return rows, jsonl, csv, parquet


def test_sql_aggregation_equals_the_numpy_reference(logs) -> None:  # type: ignore[no-untyped-def]
    """Every counter (checks, clean baseline, depth and cluster sums, transitions, turns,
    sessions) is identical to sim.counting's, key for key."""
    rows, jsonl, _, _ = logs
    got, want = read_turns(jsonl), counts_from_rows(rows)
    for table in ("checks", "baseline_checks", "cell_stats", "transitions", "turns", "session_lengths"):
        assert dict(getattr(got, table)) == dict(getattr(want, table)), table


def test_formats_agree_and_spec_routes_them(logs) -> None:  # type: ignore[no-untyped-def]
    """JSONL, CSV (detected by its conversation_id header) and Parquet give the same counts."""
    _, jsonl, csv, parquet = logs
    counts = [load_source(str(p)).counts for p in (jsonl, csv, parquet)]
    assert counts[0] == counts[1] == counts[2]


def test_refit_from_turn_log_is_clustered_and_clean(logs) -> None:  # type: ignore[no-untyped-def]
    """The refit says what it used: clustered intervals, clean baseline, depth adjustment."""
    from handoffmon.depth import DepthBuckets
    from handoffmon.refit import refit

    result = refit(read_turns(logs[1]), buckets=DepthBuckets(), now=0)
    assert result.clustered and result.clean_baseline and result.depth_adjusted


@pytest.mark.parametrize(
    ("line", "pattern"),
    [
        (GOOD.replace('"depth": 1', '"depth": 0'), r"line 2, column 'depth': '0' is not a positive integer"),
        (GOOD.replace('"pass"', '"ok"'), r"line 2, column 'verdict': 'ok' is not one of"),
        (
            GOOD.replace('"conversation_id": "c"', '"conversation_id": ""'),
            r"line 2, column 'conversation_id'",
        ),
        (GOOD.replace('"pass"', '"fail"'), r"line 2 repeats conversation, depth and rule of line 1"),
    ],
)
def test_bad_rows_name_file_and_line(tmp_path: Path, line: str, pattern: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(GOOD + "\n" + line + "\n")
    with pytest.raises(InputError, match=pattern) as err:
        read_turns(path)
    assert str(path) in str(err.value)


def test_csv_line_numbers_count_the_header(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(",".join(COLUMNS) + "\nc,1,a,none,r,pass\nc,x,a,a,r,pass\n")
    with pytest.raises(InputError, match=r"t\.csv: line 3, column 'depth'"):
        read_turns(path)


def test_missing_columns_and_empty_files_are_errors(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("conversation_id,depth,model\nc,1,a\n")
    with pytest.raises(InputError, match="missing column"):
        read_turns(path)
    path.write_text(",".join(COLUMNS) + "\n")
    with pytest.raises(NoDataError, match="no rows"):  # empty is no data (exit 4), not malformed
        read_turns(path)
    path = tmp_path / "t.jsonl"
    path.write_text("")  # no line, so no columns either: still "no rows", not "missing column"
    with pytest.raises(NoDataError, match="no rows"):
        read_turns(path)


def test_docs_show_the_sql_the_code_runs() -> None:
    """docs/guides/turn-logs.md embeds turns.sql verbatim."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "turn-logs.md").read_text()
    assert aggregation_sql().strip() in doc


def test_handoffmon_own_turn_log_is_a_source(tmp_path: Path) -> None:
    """The ``handoffmon.turn`` lines the real logs exporter writes (a ``verdicts`` map per turn,
    no rule/verdict columns) read as a turn log: one row per rule, the same checks, turns,
    baselines and cell sums the monitor counted in process; a line without verdicts adds nothing."""
    import logging

    from handoffmon.exporters.logs import StructlogExporter
    from tests.pipeline.helpers import make_config, monitor, run_conversation

    path = tmp_path / "handoffmon-turns.jsonl"
    handler = logging.FileHandler(path, encoding="utf-8")
    stdlib = logging.getLogger("test.own_turn_log")
    stdlib.setLevel(logging.INFO)
    stdlib.propagate = False
    stdlib.addHandler(handler)
    rules = [
        {"name": "short", "check": "length", "params": {"unit": "words", "max": 3}},
        {"name": "no_commas", "check": "no_commas"},
    ]
    config = make_config(rules=rules, telemetry={"prometheus": False}, refit={"interval_s": 0})
    try:
        with monitor(config, exporters=[StructlogExporter(stdlib)]) as m:
            for c, authors in enumerate([["a", "a", "b", "b"], ["b", "a"], ["a"], ["a", "a", "a"]]):
                replies = [
                    f"x{i}" if (i + c) % 2 else f"one, two three four {i}" for i in range(len(authors))
                ]
                run_conversation(m, authors, replies, metadata=[{"conversation_id": f"c{c}"}] * len(authors))
            assert m.flush(10)
            live = m.snapshot()
        stdlib.info('{"event": "something.else", "level": "info"}')
    finally:
        stdlib.removeHandler(handler)
        handler.close()
    first = json.loads(path.read_text().splitlines()[0])
    assert "verdicts" in first and "rule" not in first and "verdict" not in first
    counts = load_source(str(path)).counts
    assert counts.checks == live.checks and sum(counts.checks.values()) == 2 * 10
    assert counts.turns == live.turns
    assert counts.baseline_checks == live.baseline_checks
    assert {k: v for k, v in counts.cell_stats.items() if v} == live.cell_stats  # the SQL keeps zeros


def test_cli_refit_of_a_turn_log_is_exact_and_a_cut_last_line_is_an_error(logs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``handoffmon refit`` reads a turn log as exact totals (its cluster sums are checked
    strictly, ``refit.inputs``): a real log passes with nothing repaired; a log whose last line
    was cut by a crashed writer stops with the file named, never a refit of what was left."""
    from click.testing import CliRunner

    from handoffmon.cli import main

    _, jsonl, _, _ = logs
    res = CliRunner().invoke(main, ["refit", "--source", str(jsonl), "--out", "-", "--min-n", "5"])
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["clustered"] and doc["input_repaired_cells"] == 0 and doc["input_repairs"] == []
    text = jsonl.read_text()
    cut = tmp_path / "cut.jsonl"
    cut.write_text(text[: len(text) - len(text.splitlines()[-1]) // 2 - 1])
    res = CliRunner().invoke(main, ["refit", "--source", str(cut), "--out", "-"])
    assert res.exit_code == 1 and res.stdout == "" and f"{cut}: not a readable turn log" in res.stderr


def test_names_with_surrounding_spaces_read_the_same_from_turn_log_sqlite_and_prometheus(
    tmp_path: Path,
) -> None:
    """A model named " atlas " (and one named by spaces alone) is counted by the monitor as
    given; its turn log, its SQLite aggregates and its Prometheus series all read it back so,
    key for key, so the name joins across sources (the turn log trimmed it to "atlas")."""
    import logging

    from handoffmon.exporters.logs import StructlogExporter
    from handoffmon.pipeline.aggregates import load_counts_sqlite
    from handoffmon.sources.multiprocess import counts_from_families
    from tests.pipeline.helpers import make_config, run_conversation, runtime

    path, db = tmp_path / "handoffmon-turns.jsonl", tmp_path / "aggregates.sqlite"
    handler = logging.FileHandler(path, encoding="utf-8")
    stdlib = logging.getLogger("test.spaced_names")
    stdlib.setLevel(logging.INFO)
    stdlib.propagate = False
    stdlib.addHandler(handler)
    config = make_config(store={"backend": "sqlite", "path": str(db)}, refit={"interval_s": 0})
    rt = runtime(config, exporters=[StructlogExporter(stdlib)])
    try:
        for c, authors in enumerate([[" atlas ", " atlas ", "b"], ["b", "  ", " atlas "], [" atlas "]]):
            run_conversation(rt.monitor, authors, metadata=[{"conversation_id": f"c{c}"}] * len(authors))
        assert rt.flush(10)
        live = rt.monitor.snapshot()
        families = list(rt.registry.collect())
    finally:
        rt.close()
        stdlib.removeHandler(handler)
        handler.close()
    assert {k.model for k in live.checks} == {" atlas ", "  ", "b"}
    assert {k.prefix_model for k in live.checks} == {"none", " atlas ", "  ", "b"}
    logged = load_source(str(path)).counts
    stored = load_counts_sqlite(str(db))
    scraped = counts_from_families(families, "registry")
    for counts in (logged, stored, scraped):
        assert counts.checks == live.checks
        assert counts.baseline_checks == live.baseline_checks
        assert {k: v for k, v in counts.cell_stats.items() if v} == live.cell_stats
    assert logged.turns == stored.turns == scraped.turns == live.turns
