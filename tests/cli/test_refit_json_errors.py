"""Commands that read a refit or switch-matrix JSON refuse a damaged one with one ``error:`` line
naming the file and the key, exit 1 (``handoffmon report``, ``shapes export --source refit.json``,
``eval compare`` with a switch matrix), never a traceback or a message without the key."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result

from handoffmon.cli import main
from handoffmon.cli.exits import ExitCode


def _run(args: list[str]) -> Result:
    return CliRunner().invoke(main, args)


@pytest.fixture
def made(tmp_path: Path) -> dict[str, Path]:
    """refit.json, shapes.json and matrix.json written by the commands themselves."""
    cells = tmp_path / "cells.csv"
    header = "rule,prefix_model,model,depth_bucket,n,passes\n"
    rows = [
        f"r,{a},{b},{d},50,{30 + 3 * len(d) + (a == b) * 5}\n"
        for a in "ab"
        for b in "ab"
        for d in ("1", "2", "3-4")
    ]
    cells.write_text(header + "".join(rows), encoding="utf-8")
    rng = np.random.default_rng(0)
    scores = tmp_path / "scores.csv"
    lines = ["episode,prefix_model,suffix_model,score"]
    lines += [f"e{i},{a},{b},{rng.random():.3f}" for i in range(30) for a in "ab" for b in "ab"]
    scores.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = {
        "refit": tmp_path / "refit.json",
        "shapes": tmp_path / "shapes.json",
        "matrix": tmp_path / "matrix.json",
    }
    for args in (
        ["refit", "--source", str(cells), "--out", str(out["refit"]), "--min-n", "10"],
        ["shapes", "export", "--source", str(cells), "--out", str(out["shapes"])],
        ["stats", "switch-matrix", "--scores", str(scores), "--out", str(out["matrix"]), "--min-n", "5",
         "--resamples", "200", "--seed", "1"],
    ):  # fmt: skip
        res = _run(args)
        assert res.exit_code == 0, res.output
    return out


def _damage(path: Path, edit: Callable[[dict[str, Any]], None]) -> str:
    doc = json.loads(path.read_text(encoding="utf-8"))
    edit(doc)
    damaged = path.with_name(f"damaged-{path.name}")
    damaged.write_text(json.dumps(doc), encoding="utf-8")
    return str(damaged)


def _one_error_line(res: Result, prefix: str) -> str:
    """Exit 1, no exception but the exit, stderr exactly one ``error: <prefix>…`` line."""
    assert res.exit_code == ExitCode.ERROR, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {prefix}"), res.stderr
    return lines[0]


def test_report_refuses_version_0_naming_file_and_key(made: dict[str, Path], tmp_path: Path) -> None:
    """Version 0 was read as a version-2 document (and ``true`` as version 1)."""
    for bad in (0, True):
        path = _damage(made["refit"], lambda d, v=bad: d.__setitem__("version", v))  # type: ignore[misc]
        res = _run(["report", path, "--out", str(tmp_path / "r.html")])
        line = _one_error_line(res, f"{path}: version: ")
        assert "this reader reads 1 to 2" in line
        assert not (tmp_path / "r.html").exists()


def test_report_refuses_a_curve_one_value_short(made: dict[str, Path], tmp_path: Path) -> None:
    """A curve with fewer adherence values than buckets: a ValueError traceback out of zip() in the
    page's depth chart before."""

    def edit(doc: dict[str, Any]) -> None:
        doc["rules"]["all"]["curves"]["b"]["adherence"].pop()

    path = _damage(made["refit"], edit)
    res = _run(["report", path, "--out", str(tmp_path / "r.html")])
    line = _one_error_line(res, f"{path}: rules.all.curves.b.adherence: ")
    assert "3 value(s), but buckets has 4" in line


def test_report_refuses_a_list_where_a_fit_is(made: dict[str, Path], tmp_path: Path) -> None:
    """rules.r a list: an AttributeError traceback ('list' object has no attribute 'items') before."""
    path = _damage(made["refit"], lambda d: d["rules"].__setitem__("r", [1, 2]))
    res = _run(["report", path, "--out", str(tmp_path / "r.html")])
    _one_error_line(res, f"{path}: rules.r: expected an object, got a list")


def test_shapes_export_refuses_a_curve_bucket_of_another_setting(
    made: dict[str, Path], tmp_path: Path
) -> None:
    """A curve bucket not among the refit's buckets: 'error: tuple.index(x): x not in tuple' before,
    naming neither file nor key."""

    def edit(doc: dict[str, Any]) -> None:
        doc["rules"]["all"]["curves"]["b"]["buckets"][2] = "3-9"

    path = _damage(made["refit"], edit)
    res = _run(["shapes", "export", "--source", path, "--out", str(tmp_path / "s.json")])
    line = _one_error_line(res, f"{path}: rules.all.curves.b.buckets[2]: ")
    assert "'3-9' is not one of the refit's buckets" in line


def test_shapes_export_refuses_a_string_where_a_number_is(made: dict[str, Path], tmp_path: Path) -> None:
    """markov.*.p_tf a string: 'malformed handoffmon.refit document: could not convert…' before,
    naming no key."""

    def edit(doc: dict[str, Any]) -> None:
        fit = doc["rules"]["all"]
        fit["pairs"][0]["delta"] = "large"

    path = _damage(made["refit"], edit)
    res = _run(["shapes", "export", "--source", path, "--out", str(tmp_path / "s.json")])
    _one_error_line(res, f"{path}: rules.all.pairs[0].delta: expected a number")


def test_shapes_export_names_a_refit_json_that_is_not_utf8(made: dict[str, Path], tmp_path: Path) -> None:
    """A refit.json saved in Latin-1: "error: 'utf-8' codec can't decode…" before, no file."""
    path = tmp_path / "latin1.json"
    raw = made["refit"].read_bytes()
    path.write_bytes(raw[:10] + b"\xe8" + raw[10:])  # one Latin-1 "è" inside the document
    res = _run(["shapes", "export", "--source", str(path), "--out", str(tmp_path / "s.json")])
    _one_error_line(res, f"{path}: not UTF-8 text")


def test_eval_compare_refuses_a_damaged_switch_matrix_naming_the_key(made: dict[str, Path]) -> None:
    """mu a string and pairs an object (top-level keys of the matrix document): 'malformed …' without
    the key, and an object read as an empty list of pairs, before."""
    for key, value, said in (
        ("mu", "high", "expected a number"),
        ("pairs", {}, "expected a list, got an object"),
    ):
        path = _damage(made["matrix"], lambda d, k=key, v=value: d.__setitem__(k, v))  # type: ignore[misc]
        res = _run(["eval", "compare", "--shapes", str(made["shapes"]), path])
        line = _one_error_line(res, f"{path}: {key}: ")
        assert said in line
