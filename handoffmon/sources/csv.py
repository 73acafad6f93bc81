"""CSV sources: cells.csv / transitions.csv → ``Counts``, scores.csv → switch-matrix rows.

Formats (header row required, column order free, extra columns ignored):

* cells: ``rule,prefix_model,model,depth_bucket,n,passes`` — ``n`` checked turns
  (pass + fail) of which ``passes`` passed; ``prefix_model`` is ``none`` at depth 1;
  ``depth_bucket`` is a label such as ``1``, ``3-4`` or ``33+``. Repeated keys add up.
* transitions: ``rule,model,handoff,from_verdict,to_verdict,count`` with handoff
  ``true|false|unknown`` and verdicts ``pass|fail|not_applicable|error``.
* scores: ``episode,prefix_model,suffix_model,score`` (one row per episode and cell).

Every problem raises ``InputError`` naming the file, the line and the column.
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from handoffmon.counts import CheckKey, Counts, TransitionKey
from handoffmon.depth import DepthBuckets
from handoffmon.errors import InputError, NoDataError
from handoffmon.types import VERDICTS

CELLS_COLUMNS = ("rule", "prefix_model", "model", "depth_bucket", "n", "passes")
TRANSITIONS_COLUMNS = ("rule", "model", "handoff", "from_verdict", "to_verdict", "count")
SCORES_COLUMNS = ("episode", "prefix_model", "suffix_model", "score")
HANDOFF_VALUES = ("true", "false", "unknown")
_KINDS = (
    (CELLS_COLUMNS, "a cells CSV", "`handoffmon refit --source` and `shapes export --source`"),
    (TRANSITIONS_COLUMNS, "a transitions CSV", "`handoffmon refit --transitions`"),
    (SCORES_COLUMNS, "a switch-matrix scores CSV", "`handoffmon stats switch-matrix --scores`"),
    (("conversation_id",), "a turn log", "`handoffmon refit --source` and `shapes export --source`"),
)
"""The CSV files handoffmon reads, by their header: (columns, kind, what reads it). A header with
another kind's columns says which file it is when a command is given the wrong one."""

_T = TypeVar("_T")


class _Row:
    """One CSV row with error messages that point at file, line and column."""

    def __init__(self, path: str, line: int, values: dict[str, str]) -> None:
        self.path, self.line, self.values = path, line, values

    def error(self, column: str, message: str) -> InputError:
        return InputError(f"{self.path}: line {self.line}, column {column!r}: {message}")

    def text(self, column: str) -> str:
        value = (self.values.get(column) or "").strip()
        if not value:
            raise self.error(column, "empty value")
        return value

    def name(self, column: str) -> str:
        """A rule or model name exactly as written, spaces included: the SQLite, Prometheus and
        turn-log sources keep a model named " atlas " so, and ``write_cells_csv`` writes it so."""
        value = self.values.get(column) or ""
        if not value:
            raise self.error(column, "empty value")
        return value

    def parse(self, column: str, conv: Callable[[str], _T], what: str) -> _T:
        raw = self.text(column)
        try:
            return conv(raw)
        except (ValueError, TypeError) as exc:
            raise self.error(column, f"{raw!r} is not {what}") from exc

    def count(self, column: str) -> int:
        value = self.parse(column, int, "an integer")
        if value < 0:
            raise self.error(column, f"{value} is negative")
        return value

    def choice(self, column: str, allowed: tuple[str, ...]) -> str:
        value = self.text(column)
        if value not in allowed:
            raise self.error(column, f"{value!r} is not one of {', '.join(allowed)}")
        return value


def _rows(path: str | Path, columns: tuple[str, ...]) -> Iterator[_Row]:
    name = str(path)
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header = [h.strip() for h in (reader.fieldnames or [])]
            missing = [c for c in columns if c not in header]
            if missing:
                raise InputError(
                    f"{name}: line 1: missing column(s) {', '.join(missing)}{_kind_hint(header)}"
                )
            reader.fieldnames = header
            for values in reader:
                if None in values:
                    raise InputError(f"{name}: line {reader.line_num}: more fields than the header")
                yield _Row(name, reader.line_num, values)
    except OSError as exc:
        raise InputError(f"{name}: cannot read: {exc.strerror or exc}") from exc
    except (csv.Error, UnicodeDecodeError) as exc:
        raise InputError(f"{name}: not a readable CSV file: {exc}") from exc


def _kind_hint(header: list[str]) -> str:
    """The hint "; by its header (…) this is <kind>, read by <command>" when ``header`` has all
    the columns of another CSV handoffmon reads (it lacks some expected ones: not this kind)."""
    for columns, kind, reader in _KINDS:
        if all(c in header for c in columns):
            return f"; by its header ({', '.join(columns)}) this is {kind}, read by {reader}"
    return ""


def _bucket_label(row: _Row) -> str:
    label = row.text("depth_bucket")
    try:
        DepthBuckets.lower_bound(label)
    except ValueError as exc:
        raise row.error("depth_bucket", f"{label!r} is not a depth bucket label like 1, 3-4 or 33+") from exc
    return label


def read_cells_csv(path: str | Path) -> Counts:
    """Read a cells.csv into ``Counts.checks`` (pass = passes, fail = n − passes)."""
    checks: Counter[CheckKey] = Counter()
    for row in _rows(path, CELLS_COLUMNS):
        rule, prefix, model = row.name("rule"), row.name("prefix_model"), row.name("model")
        bucket = _bucket_label(row)
        n, passes = row.count("n"), row.count("passes")
        if passes > n:
            raise row.error("passes", f"{passes} passes exceed n = {n}")
        checks[CheckKey(rule, model, prefix, bucket, "pass")] += passes
        checks[CheckKey(rule, model, prefix, bucket, "fail")] += n - passes
    return Counts(checks=dict(checks))


def read_transitions_csv(path: str | Path) -> Counts:
    """Read a transitions.csv into ``Counts.transitions``."""
    trans: Counter[TransitionKey] = Counter()
    for row in _rows(path, TRANSITIONS_COLUMNS):
        key = TransitionKey(
            row.name("rule"),
            row.name("model"),
            row.choice("handoff", HANDOFF_VALUES),
            row.choice("from_verdict", VERDICTS),  # type: ignore[arg-type]
            row.choice("to_verdict", VERDICTS),  # type: ignore[arg-type]
        )
        trans[key] += row.count("count")
    return Counts(transitions=dict(trans))


def _finite(raw: str) -> float:
    value = float(raw)
    if not math.isfinite(value):
        raise ValueError(raw)
    return value


def read_scores_csv(path: str | Path) -> list[tuple[str, str, str, float]]:
    """Read a switch-matrix scores.csv; a repeated (episode, prefix, suffix) is an error.

    Model names are read exactly as written (``scores_csv`` writes author names so).

    Raises:
        InputError: a missing column or a bad row (file and line named).
        NoDataError: the file holds no rows.
    """
    seen: dict[tuple[str, str, str], int] = {}
    out: list[tuple[str, str, str, float]] = []
    for row in _rows(path, SCORES_COLUMNS):
        key = (row.text("episode"), row.name("prefix_model"), row.name("suffix_model"))
        if key in seen:
            raise row.error(
                "episode",
                f"episode {key[0]!r} repeated for cell {key[1]}->{key[2]} (first on line {seen[key]})",
            )
        seen[key] = row.line
        out.append((*key, row.parse("score", _finite, "a finite number")))
    if not out:
        raise NoDataError(f"{path}: no rows")
    return out


def scores_csv_text(rows: Iterable[tuple[str, str, str, float]]) -> str:
    """A scores.csv of (episode, prefix_model, suffix_model, score) rows, names quoted where CSV
    needs it (round-trips with ``read_scores_csv``)."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(SCORES_COLUMNS)
    w.writerows((e, a, b, repr(score)) for e, a, b, score in rows)
    return out.getvalue()


def write_cells_csv(counts: Counts, path: str | Path) -> None:
    """Write ``counts.checks`` as a cells.csv (round-trips with ``read_cells_csv``)."""
    cells: dict[tuple[str, str, str, str], list[int]] = {}
    for k, v in counts.checks.items():
        if k.verdict in ("pass", "fail"):
            cell = cells.setdefault((k.rule, k.prefix_model, k.model, k.depth_bucket), [0, 0])
            cell[0 if k.verdict == "pass" else 1] += v
    _write(path, CELLS_COLUMNS, ([*key, p + f, p] for key, (p, f) in sorted(cells.items())))


def write_transitions_csv(counts: Counts, path: str | Path) -> None:
    """Write ``counts.transitions`` as a transitions.csv."""
    _write(path, TRANSITIONS_COLUMNS, ([*k, v] for k, v in sorted(counts.transitions.items())))


def _write(path: str | Path, header: tuple[str, ...], rows: Any) -> None:
    tmp = Path(f"{path}.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    tmp.replace(path)
