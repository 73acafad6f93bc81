"""An eval's output holds only what it asked for, and compare counts each database's runs once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from handoffmon.cli import main
from handoffmon.depth import DepthBuckets
from handoffmon.evals.shapes import POOLED, RuleShape, Shapes

SCRIPT = {
    "id": "scope",
    "runs": 3,
    "rules": [{"name": "no_commas", "check": "no_commas"}],
    "turns": [{"user": "Where is my order?", "checkpoint": True}, {"user": "And now?", "checkpoint": True}],
}


def _eval(tmp_path: Path, model: str, out: str, *args: str) -> dict[str, Any]:
    script = tmp_path / "scope.yaml"
    script.write_text(yaml.safe_dump(SCRIPT), encoding="utf-8")
    run = ["eval", "run", str(script), "--router", "sim:3", "--model", model, "--no-progress"]
    res = CliRunner().invoke(
        main, [*run, "--db", str(tmp_path / "e.sqlite"), "--out", str(tmp_path / out), *args]
    )
    assert res.exit_code == 0, res.output
    return dict(json.loads((tmp_path / out).read_text()))


def _n_by_depth(doc: dict[str, Any]) -> dict[int, int]:
    out: dict[int, int] = {}
    for c in doc["curves"]:
        if c["script"] == POOLED:
            out[c["depth"]] = out.get(c["depth"], 0) + c["n"]
    return out


def test_eval_output_holds_only_the_requested_model_and_runs(tmp_path: Path) -> None:
    """A db with sim-00 × 3 runs: `--model sim-01 --runs 2` reports group-01 alone, n = 2 per depth."""
    first = _eval(tmp_path, "sim-00", "a.json")
    assert first["models"] == ["group-00"] and _n_by_depth(first) == {1: 3, 2: 3}
    other = _eval(tmp_path, "sim-01", "b.json", "--runs", "2")
    assert other["models"] == ["group-01"] and set(other["authors"]) == {"group-01"}
    assert {c["model"] for c in other["curves"]} == {"group-01"}
    assert _n_by_depth(other) == {1: 2, 2: 2}
    fewer = _eval(tmp_path, "sim-00", "c.json", "--runs", "2")  # resumes runs 0, 1 of the 3 stored
    assert fewer["models"] == ["group-00"] and _n_by_depth(fewer) == {1: 2, 2: 2}


def _shapes(path: Path, authors: list[str]) -> str:
    labels = DepthBuckets().labels
    k = len(labels)
    rules = tuple(
        RuleShape("no_commas", a, (40,) * k, (20,) * k, (0.5,) * k, (0.35,) * k, (0.65,) * k)
        for a in [*authors, POOLED]
    )
    sessions = {"method": "histogram", "conversations": 40, "p50": 2, "p90": 2}
    path.write_text(Shapes(0.0, "test", labels, rules, sessions, {}, ()).to_json(), encoding="utf-8")
    return str(path)


def test_compare_refuses_the_same_runs_given_twice(tmp_path: Path) -> None:
    """The same file twice, or two outputs of one db's script and model: exit 1 naming the files."""
    doc = _eval(tmp_path, "sim-00", "a.json")
    shapes = _shapes(tmp_path / "shapes.json", sorted(doc["authors"]["group-00"]))
    a = str(tmp_path / "a.json")
    ok = CliRunner().invoke(main, ["eval", "compare", "--shapes", shapes, a])
    assert ok.exit_code == 0, ok.output
    twice = CliRunner().invoke(main, ["eval", "compare", "--shapes", shapes, a, a])
    assert twice.exit_code == 1 and f"{a} is given twice" in twice.output, twice.output
    assert "'scope'" in twice.output and "counted twice" in twice.output
    _eval(tmp_path, "sim-00", "b.json", "--runs", "2")
    b = str(tmp_path / "b.json")
    both = CliRunner().invoke(main, ["eval", "compare", "--shapes", shapes, a, b])
    assert both.exit_code == 1 and f"{a} and {b} both hold" in both.output, both.output
    other = _eval(tmp_path, "sim-01", "c.json")  # another model of the same db: no overlap
    shapes = _shapes(
        tmp_path / "shapes2.json", sorted({*doc["authors"]["group-00"], *other["authors"]["group-01"]})
    )
    fine = CliRunner().invoke(main, ["eval", "compare", "--shapes", shapes, a, str(tmp_path / "c.json")])
    assert fine.exit_code == 0, fine.output
