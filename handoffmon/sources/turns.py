"""The turn-log source: one row per checked turn and rule (JSONL, CSV or Parquet) → ``Counts``.

Columns ``conversation_id, depth, model, prefix_model, rule, verdict`` (verdict pass, fail,
not_applicable or error; other columns are ignored). handoffmon's own turn log (the
``handoffmon.turn`` lines of ``telemetry.log_turns``) works as is: without ``rule`` and
``verdict`` columns its ``verdicts`` map is expanded to one row per rule. Rows are validated first (the first
bad row is reported with its file and line), then aggregated by embedded DuckDB running
``turns.sql`` — the same statements a warehouse can run on its own turn table
(``docs/guides/turn-logs.md``). DuckDB streams, so files larger than memory work.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from handoffmon._extras import requires_extra
from handoffmon.counts import CELL_TOTAL, CellStatKey, CheckKey, Counts, TransitionKey, TurnKey
from handoffmon.depth import DepthBuckets
from handoffmon.errors import InputError, NoDataError
from handoffmon.types import VERDICTS

COLUMNS = ("conversation_id", "depth", "model", "prefix_model", "rule", "verdict")
PADDED = ("depth", "verdict")
"""Columns read with surrounding spaces trimmed; the names (ids, models, rules) are kept exactly."""
VERDICTS_MAP = "verdicts"
"""handoffmon's own turn log has, instead of ``rule``/``verdict``, this map rule → verdict."""
SUFFIXES = (".jsonl", ".ndjson", ".csv", ".parquet")


def aggregation_sql() -> str:
    """The aggregation statements (``turns.sql``), as shipped."""
    return resources.files("handoffmon.sources").joinpath("turns.sql").read_text(encoding="utf-8")


def statements(sql: str | None = None) -> Iterator[tuple[str, str]]:
    """(name, statement) for every ``-- name:`` block of ``turns.sql``."""
    text = sql or aggregation_sql()
    for block in re.split(r"^-- name: ", text, flags=re.M)[1:]:
        name, _, body = block.partition("\n")
        yield name.strip(), body.strip().rstrip(";")


def _connect() -> Any:
    with requires_extra("turns", "a turn-log source"):
        import duckdb
    return duckdb.connect(":memory:")


def _reader(path: Path) -> tuple[str, int, str]:
    """(DuckDB table function, line offset of row 1, what a 'line' is) for a file."""
    quoted = str(path).replace("'", "''")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return f"read_csv('{quoted}', header = true, all_varchar = true)", 1, "line"
    if suffix == ".parquet":
        return f"read_parquet('{quoted}')", 0, "row"
    return f"read_json('{quoted}', format = 'newline_delimited')", 0, "line"


def _expand_verdicts(con: Any, path: Path, types: dict[str, str]) -> None:
    """Table ``raw`` of handoffmon's own turn log (``handoffmon.turn`` lines: a ``verdicts``
    map rule → verdict per turn) as one row per turn and rule, keeping each row's line number.

    Lines without verdicts (no rule checked, or another event logged to the same file) give
    no row; a turn whose author was never known (``model`` null) is ``unknown``, as its labels.
    """
    as_json = f"to_json(r.{VERDICTS_MAP})"
    if types[VERDICTS_MAP] == "VARCHAR":  # CSV: the map as JSON text
        as_json = f"CAST(r.{VERDICTS_MAP} AS JSON)"
    keep, model = f"EXCLUDE ({VERDICTS_MAP})", ""
    if "model" in types:  # a missing column is reported by the caller
        keep = f"EXCLUDE (model, {VERDICTS_MAP})"
        model = "coalesce(NULLIF(CAST(r.model AS VARCHAR), ''), 'unknown') AS model, "
    con.execute(
        f"CREATE TEMP TABLE expanded AS SELECT r.* {keep}, "
        f"{model}e.key AS rule, e.value ->> '$' AS verdict "
        f"FROM raw r, json_each({as_json}) e WHERE e.type <> 'NULL' ORDER BY r.handoffmon_row"
    )
    con.execute("DROP TABLE raw")
    con.execute("ALTER TABLE expanded RENAME TO raw")
    if con.execute("SELECT count(*) FROM raw").fetchone()[0] == 0:
        raise NoDataError(f"{path}: no checked turns (no line has verdicts)")


def _load(con: Any, path: Path) -> None:
    """Create table ``turns`` from the file after checking every row; the first bad one is an error."""
    import duckdb

    source, offset, unit = _reader(path)
    try:
        con.execute(
            f"CREATE TEMP TABLE raw AS SELECT row_number() OVER () AS handoffmon_row, * FROM {source}"
        )
    except duckdb.Error as exc:
        raise InputError(f"{path}: not a readable turn log: {str(exc).splitlines()[0]}") from exc
    if con.execute("SELECT count(*) FROM raw").fetchone()[0] == 0:  # before columns: none inferred
        raise NoDataError(f"{path}: no rows")
    types = {r[0]: r[1] for r in con.execute("DESCRIBE raw").fetchall()}
    if "rule" not in types and "verdict" not in types and VERDICTS_MAP in types:
        _expand_verdicts(con, path, types)
        types = {r[0]: r[1] for r in con.execute("DESCRIBE raw").fetchall()}
    have = set(types)
    missing = [c for c in COLUMNS if c not in have]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)} (need {', '.join(COLUMNS)})")
    # names as written, spaces included, as the SQLite and Prometheus sources keep them (a
    # canonical name " atlas " must join across sources); depth and verdict may be padded
    text = {c: f"trim(CAST({c} AS VARCHAR))" if c in PADDED else f"CAST({c} AS VARCHAR)" for c in COLUMNS}
    verdicts = ", ".join(f"'{v}'" for v in VERDICTS)
    checks = [
        *(
            (f"{text[c]} IS NULL OR {text[c]} = ''", c, "empty value")
            for c in ("conversation_id", "model", "prefix_model", "rule", "verdict", "depth")
        ),
        (f"TRY_CAST({text['depth']} AS BIGINT) IS NULL OR TRY_CAST({text['depth']} AS BIGINT) < 1",
         "depth", "not a positive integer"),
        (f"{text['verdict']} NOT IN ({verdicts})", "verdict", f"not one of {', '.join(VERDICTS)}"),
    ]  # fmt: skip
    for cond, column, what in checks:
        bad = con.execute(
            f"SELECT handoffmon_row, {text[column]} FROM raw WHERE {cond} ORDER BY 1 LIMIT 1"
        ).fetchone()
        if bad is not None:
            raise InputError(f"{path}: {unit} {bad[0] + offset}, column {column!r}: {bad[1]!r} is {what}")
    con.execute(
        "CREATE TEMP TABLE turns AS SELECT "
        + ", ".join(
            f"{text[c]} AS {c}" if c != "depth" else f"CAST({text[c]} AS BIGINT) AS depth" for c in COLUMNS
        )
        + ", handoffmon_row FROM raw"
    )
    dup = con.execute(
        "SELECT min(handoffmon_row), max(handoffmon_row) FROM turns GROUP BY conversation_id, depth, rule "
        "HAVING count(*) > 1 ORDER BY 1 LIMIT 1"
    ).fetchone()
    if dup is not None:
        raise InputError(
            f"{path}: {unit} {dup[1] + offset} repeats conversation, depth and rule "
            f"of {unit} {dup[0] + offset}"
        )


def _buckets(con: Any, buckets: DepthBuckets) -> None:
    edges = buckets.edges
    rows = [
        (lo, edges[i + 1] - 1 if i + 1 < len(edges) else None, buckets.labels[i])
        for i, lo in enumerate(edges)
    ]
    con.execute("CREATE TEMP TABLE handoffmon_buckets (lo BIGINT, hi BIGINT, label VARCHAR)")
    con.executemany("INSERT INTO handoffmon_buckets VALUES (?, ?, ?)", rows)


def aggregate(con: Any, buckets: DepthBuckets) -> Counts:
    """Run ``turns.sql`` on a connection holding a ``turns`` table; returns the counts."""
    _buckets(con, buckets)
    out: dict[str, list[tuple[Any, ...]]] = {}
    for name, sql in statements():
        result = con.execute(sql)
        out[name] = result.fetchall() if result.description else []
    stats: dict[CellStatKey, int] = {
        CellStatKey(r, m, p, b, "depth"): int(n) for r, m, p, b, n in out["depth_sums"]
    }
    for r, m, p, g, y2, yn, n2 in out["cluster_sums"]:
        for stat, v in (("conversations", g), ("y2", y2), ("yn", yn), ("n2", n2)):
            stats[CellStatKey(r, m, p, CELL_TOTAL, stat)] = int(v)
    return Counts(
        checks={CheckKey(*k): int(n) for *k, n in out["checks"]},  # type: ignore[misc]
        transitions={TransitionKey(*k): int(n) for *k, n in out["transitions"]},  # type: ignore[misc]
        turns={TurnKey(*k): int(n) for *k, n in out["turns"]},  # type: ignore[misc]
        session_lengths={int(d): int(n) for d, n in out["session_lengths"]},
        baseline_checks={CheckKey(*k): int(n) for *k, n in out["baseline_checks"]},  # type: ignore[misc]
        cell_stats=stats,
    )


def read_turns(path: str | Path, buckets: DepthBuckets | None = None) -> Counts:
    """Aggregate a turn log (``.jsonl``/``.ndjson``, ``.csv`` or ``.parquet``).

    Raises:
        InputError: unreadable file, missing column, or a bad row (file and line named).
        NoDataError: the file holds no rows.
    """
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such file")
    con = _connect()
    try:
        _load(con, p)
        return aggregate(con, buckets or DepthBuckets())
    finally:
        con.close()
