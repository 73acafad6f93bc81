"""``eval run --jsonl``: '-' is stdout as for every other output, and a failed export leaves no
temp file (audit 2026-12-07).

``--jsonl -`` wrote a file literally named ``-`` in the working directory (``--out -`` is
stdout); the export went through a fixed ``<path>.tmp`` that an error mid-export left behind.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from handoffmon.cli import main
from handoffmon.errors import StoreError
from handoffmon.evals.store import ResultStore, Row

SCRIPT = {
    "id": "jsonl",
    "runs": 1,
    "rules": [{"name": "no_commas", "check": "no_commas"}],
    "turns": [{"user": "hi", "checkpoint": True}, {"user": "and?", "checkpoint": True}],
}


def _run(tmp_path: Path, *args: str) -> Any:
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump(SCRIPT), encoding="utf-8")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        return CliRunner().invoke(
            main,
            ["eval", "run", str(script), "--router", "sim", "--model", "general", "--db", "e.sqlite",
             "--no-progress", *args],
        )  # fmt: skip
    finally:
        os.chdir(cwd)


def test_jsonl_dash_writes_the_rows_on_stdout_and_no_file(tmp_path: Path) -> None:
    """As --out -: the rows on stdout, the summary on stderr, no file named '-'."""
    res = _run(tmp_path, "--jsonl", "-")
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(r["turn"], r["rule"]) for r in rows] == [(1, "no_commas"), (2, "no_commas")]
    assert not (tmp_path / "-").exists()
    assert "eval run: 1 run(s)" in res.stderr


def test_jsonl_and_out_both_on_stdout_are_refused_before_any_call(tmp_path: Path) -> None:
    """A usage error (exit 2, as --limit without --multi-if), before --db is created."""
    res = _run(tmp_path, "--jsonl", "-", "--out", "-")
    assert res.exit_code == 2
    assert "--out and --jsonl" in res.stderr and "stdout" in res.stderr
    assert not (tmp_path / "e.sqlite").exists()


def _row(turn: int) -> Row:
    return Row("s", "m", 0, turn, "r", "pass", "", None, True, False, "a", 1)


def test_a_failed_export_leaves_the_old_file_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading the rows fails half way: the previous export stays whole, no temp file is left."""
    out = tmp_path / "rows.jsonl"
    out.write_text("previous export\n", encoding="utf-8")
    with ResultStore(tmp_path / "e.sqlite") as store:

        def rows(**_: Any) -> Any:
            yield _row(1)
            raise StoreError("disk I/O error")

        monkeypatch.setattr(store, "rows", rows)
        with pytest.raises(StoreError):
            store.export_jsonl(out)
    assert out.read_text(encoding="utf-8") == "previous export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.sqlite", "rows.jsonl"]
