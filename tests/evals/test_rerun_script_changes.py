"""A checkpoint or rule added to a script after its turns were stored shows up in a rerun's curves."""

from __future__ import annotations

import copy
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from handoffmon.cli import main

BASE: dict[str, Any] = {
    "id": "grow",
    "runs": 3,
    "rules": [{"name": "no_commas", "check": "no_commas"}],
    "turns": [
        {"user": "Where is my order?", "checkpoint": True},
        {"user": "How long does delivery take?"},
        {"user": "Can I change the address?"},
        {"user": "Thanks, anything else?", "checkpoint": True},
    ],
}


def _run(tmp_path: Path, script: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    path = tmp_path / "grow.yaml"
    path.write_text(yaml.safe_dump(script), encoding="utf-8")
    out = tmp_path / "eval.json"
    args = ["eval", "run", str(path), "--router", "sim:3", "--model", "sim-00", "--no-progress"]
    res = CliRunner().invoke(main, [*args, "--db", str(tmp_path / "e.sqlite"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    return res.output, json.loads(out.read_text())


def _pooled(doc: dict[str, Any]) -> dict[tuple[str, int], int]:
    """(rule, depth) → checks, summed over the authors that answered (router fallbacks)."""
    out: dict[tuple[str, int], int] = {}
    for c in doc["curves"]:
        if c["script"] == "*":
            out[(c["rule"], c["depth"])] = out.get((c["rule"], c["depth"]), 0) + c["n"]
    return out


def test_a_checkpoint_added_after_the_run_is_in_the_rerun_curves(tmp_path: Path) -> None:
    """Depth 2 becomes a checkpoint: the rerun generates nothing and reports depths 1, 2 and 4."""
    _, first = _run(tmp_path, BASE)
    assert set(_pooled(first)) == {("no_commas", 1), ("no_commas", 4)}
    edited = copy.deepcopy(BASE)
    edited["turns"][1]["checkpoint"] = True
    output, doc = _run(tmp_path, edited)
    assert "0 turn(s) generated, 12 resumed" in output, output
    assert doc["scripts"][0]["checkpoints"] == [1, 2, 4]
    assert _pooled(doc) == {("no_commas", 1): 3, ("no_commas", 2): 3, ("no_commas", 4): 3}
    assert doc["verdicts"]["pass"] + doc["verdicts"].get("fail", 0) == 9


def test_a_rule_added_after_the_run_is_checked_on_the_stored_replies(tmp_path: Path) -> None:
    """A standing rule and a rule added at turn 3: stored replies are checked, nothing regenerated."""
    _run(tmp_path, BASE)
    edited = copy.deepcopy(BASE)
    edited["rules"].append({"name": "short", "check": "length", "params": {"unit": "words", "max": 8}})
    edited["turns"][2]["add_rules"] = [{"name": "tag", "check": "answer_tag"}]
    output, doc = _run(tmp_path, edited)
    m = re.search(r"(\d+) turn\(s\) generated, (\d+) resumed, (\d+) verdict\(s\) added", output)
    assert m is not None and m.groups() == ("0", "12", str(3 * (4 + 2))), output
    assert _pooled(doc) == {(r, d): 3 for r in ("no_commas", "short") for d in (1, 4)} | {("tag", 4): 3}
    with sqlite3.connect(tmp_path / "e.sqlite") as c:
        words = {
            (run, turn): len(reply.split())
            for run, turn, reply in c.execute("SELECT run, turn, reply FROM turns WHERE turn IN (1, 4)")
        }
        short = {
            (run, turn): verdict
            for run, turn, verdict in c.execute("SELECT run, turn, verdict FROM rows WHERE rule='short'")
        }
    # the verdicts were computed from the stored replies themselves
    assert {k: v for k, v in short.items() if k in words} == {
        k: ("pass" if n <= 8 else "fail") for k, n in words.items()
    }
    again, _ = _run(tmp_path, edited)
    assert "verdict(s) added" not in again, again
