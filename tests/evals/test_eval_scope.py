"""An eval's output holds only what it asked for, and compare counts each database's runs once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from handoffmon.cli import main
from handoffmon.depth import DepthBuckets
from handoffmon.evals.results import build_result
from handoffmon.evals.script import script_from_dict
from handoffmon.evals.shapes import POOLED, RuleShape, Shapes
from handoffmon.evals.store import Row
from handoffmon.evals.switch import CellScore, analyse

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


def _shapes(
    path: Path,
    authors: list[str],
    rules: tuple[str, ...] = ("no_commas",),
    pairs: tuple[Any, ...] = (),
    passes: dict[str, int] | None = None,
) -> str:
    """A shapes document: every (rule, author) with n = 40 and ``passes[rule]`` (default 20) per bucket."""
    labels = DepthBuckets().labels
    k = len(labels)
    shapes = tuple(
        RuleShape(rule, a, (40,) * k, (x,) * k, (x / 40,) * k, (0.0,) * k, (1.0,) * k)
        for rule in rules
        for x in [(passes or {}).get(rule, 20)]
        for a in [*authors, POOLED]
    )
    sessions = {"method": "histogram", "conversations": 40, "p50": 2, "p90": 2}
    path.write_text(Shapes(0.0, "test", labels, shapes, sessions, {}, pairs).to_json(), encoding="utf-8")
    return str(path)


def _eval_doc(path: Path, authors: dict[str, list[str]], depth: int = 1, passes: int = 5) -> str:
    """An eval JSON from rows: author → rules, each checked at ``depth`` in 10 runs (``passes`` pass)."""
    script = script_from_dict(
        {
            "id": "names",
            "rules": [
                {"name": r, "check": "no_commas"} for r in sorted({r for v in authors.values() for r in v})
            ],
            "turns": [{"user": f"t{d}", "checkpoint": d == depth} for d in range(1, depth + 1)],
        }
    )
    rows = [
        Row("names", a, run, depth, rule, "pass" if run < passes else "fail", "", None, True, False, a, 1)
        for a, rules in authors.items()
        for rule in rules
        for run in range(10)
    ]
    path.write_text(build_result(rows, [script], str(path)).to_json(), encoding="utf-8")
    return str(path)


def test_names_that_only_one_side_has_are_listed_and_strict_exits_4(tmp_path: Path) -> None:
    """Eval atlas, cedar × no_commas, short vs production atlas, birch × no_commas, tone."""
    shapes = _shapes(tmp_path / "shapes.json", ["atlas", "birch"], rules=("no_commas", "tone"))
    ev = _eval_doc(tmp_path / "eval.json", {"atlas": ["no_commas", "short"], "cedar": ["no_commas"]})
    args = ["eval", "compare", "--shapes", shapes, ev, "--out", str(tmp_path / "cmp.json")]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "cmp.json").read_text())
    assert {(r["rule"], r["model"]) for r in doc["rules"]} == {("no_commas", "atlas")}
    assert doc["unmatched"] == {
        "eval_authors": ["cedar"],
        "eval_rules": ["short"],
        "production_models": ["birch"],
        "production_rules": ["tone"],
    }
    for name in ("cedar", "short", "birch", "tone"):
        assert any(name in n for n in doc["notes"]), doc["notes"]
        assert any(line.startswith("warning:") and name in line for line in res.stderr.splitlines()), (
            res.stderr
        )
    strict = CliRunner().invoke(main, [*args, "--strict"])
    assert strict.exit_code == 4 and "--strict" in strict.stderr, strict.output
    one = CliRunner().invoke(main, [*args, "--model", "atlas", "--strict"])  # atlas: short vs tone
    assert one.exit_code == 4 and "short" in one.stderr and "cedar" not in one.stderr, one.output
    matched = _eval_doc(tmp_path / "m.json", {"atlas": ["no_commas", "tone"], "birch": ["no_commas", "tone"]})
    ok = CliRunner().invoke(main, ["eval", "compare", "--shapes", shapes, matched, "--strict"])
    assert ok.exit_code == 0 and "warning" not in ok.stderr, ok.output


def test_compare_model_with_only_a_switch_matrix(tmp_path: Path) -> None:
    """--model atlas with a matrix over atlas, birch: its cells count as eval data; cedar→atlas is missing."""
    pairs = (
        {"prefix_model": "birch", "model": "atlas", "turns": 60, "share": 0.6},
        {"prefix_model": "cedar", "model": "atlas", "turns": 40, "share": 0.4},
    )
    shapes = _shapes(tmp_path / "shapes.json", ["atlas", "birch", "cedar"], pairs=pairs)
    cells = [
        CellScore(f"e{i}", a, b, float((i + len(a + b)) % 2), (a, b), 1)
        for i in range(6)
        for a in ("atlas", "birch")
        for b in ("atlas", "birch")
    ]
    (tmp_path / "matrix.json").write_text(analyse(cells, resamples=200, min_n=2).to_json(), encoding="utf-8")
    args = ["eval", "compare", "--shapes", shapes, str(tmp_path / "matrix.json"), "--model", "atlas"]
    res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "cmp.json")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "cmp.json").read_text())
    assert [(p["prefix_model"], p["model"]) for p in doc["missing_pairs"]] == [("cedar", "atlas")]
    assert "atlas" in doc["eval_authors"]
    unknown = CliRunner().invoke(main, [*args[:-1], "dune"])
    assert unknown.exit_code == 4 and "unknown model 'dune'" in unknown.stderr, unknown.output


def test_compare_refuses_the_same_runs_given_twice(tmp_path: Path) -> None:
    """The same file twice, or two outputs of one db's script and model: exit 1 naming the files."""
    doc = _eval(tmp_path, "sim-00", "a.json")
    shapes = _shapes(tmp_path / "shapes.json", sorted(doc["authors"]["group-00"]))
    a = str(tmp_path / "a.json")
    ok = CliRunner().invoke(main, ["eval", "compare", "--shapes", shapes, a])
    assert ok.exit_code == 0, ok.output
    twice = CliRunner().invoke(main, ["eval", "compare", "--shapes", shapes, a, a])
    assert twice.exit_code == 1 and f"{a} is given twice: the runs of script" in twice.output, twice.output
    assert "'scope'" in twice.output and "counted twice" in twice.output
    _eval(tmp_path, "sim-00", "b.json", "--runs", "2")
    b = str(tmp_path / "b.json")
    both = CliRunner().invoke(main, ["eval", "compare", "--shapes", shapes, a, b])
    assert both.exit_code == 1 and f"{a} and {b} overlap: the runs of script" in both.output, both.output
    other = _eval(tmp_path, "sim-01", "c.json")  # another model of the same db: no overlap
    shapes = _shapes(
        tmp_path / "shapes2.json", sorted({*doc["authors"]["group-00"], *other["authors"]["group-01"]})
    )
    fine = CliRunner().invoke(main, ["eval", "compare", "--shapes", shapes, a, str(tmp_path / "c.json")])
    assert fine.exit_code == 0, fine.output


def test_a_production_rule_that_always_fails_is_flagged_past_depth_2(tmp_path: Path) -> None:
    """Production 0/40 per bucket, no Markov fit, vs eval 9/10 at depth 6 (bucket 5-8): flagged, exit 3.

    A 0.5 rule at the same depth cannot be matched (no fit): reported, outside the Holm family.
    """
    shapes = _shapes(tmp_path / "s.json", ["atlas"], rules=("allfail", "mid"), passes={"allfail": 0})
    ev = _eval_doc(tmp_path / "e.json", {"atlas": ["allfail", "mid"]}, depth=6, passes=9)
    res = CliRunner().invoke(
        main, ["eval", "compare", "--shapes", shapes, ev, "--out", str(tmp_path / "c.json")]
    )
    assert res.exit_code == 3, res.output
    rows = {r["rule"]: r for r in json.loads((tmp_path / "c.json").read_text())["rules"]}
    fail, mid = rows["allfail"], rows["mid"]
    assert fail["depth_bucket"] == "5-8" and fail["depth_matched"] and fail["depth_shift"] == 0.0
    assert fail["flagged"] and fail["p_adjusted"] == fail["p_value"]  # a family of one
    assert not mid["depth_matched"] and not mid["flagged"] and mid["p_adjusted"] is None


def test_eval_checkpoints_production_has_no_checks_at_are_listed(tmp_path: Path) -> None:
    """atlas × no_commas at depth 6 where production's 5-8 bucket is empty, and birch × no_commas
    (production checks no_commas on atlas only, birch only for tone): both used to drop out of the
    comparison unlisted, exit 0; now they are in the notes, ``unmatched`` and a warning (--strict: 4)."""
    shapes = Path(_shapes(tmp_path / "shapes.json", ["atlas", "birch"], rules=("no_commas", "tone")))
    doc = json.loads(shapes.read_text())
    i = doc["buckets"].index("5-8")
    doc["rules"] = [r for r in doc["rules"] if (r["rule"], r["model"]) != ("no_commas", "birch")]
    doc["rules"] = [r for r in doc["rules"] if (r["rule"], r["model"]) != ("tone", "atlas")]
    for r in doc["rules"]:
        if r["model"] == "atlas":
            r["n"][i] = r["passes"][i] = 0
            r["adherence"][i] = r["ci_low"][i] = r["ci_high"][i] = None
    shapes.write_text(json.dumps(doc), encoding="utf-8")
    shallow = _eval_doc(tmp_path / "e1.json", {"atlas": ["no_commas"]}, depth=1)
    deep = _eval_doc(tmp_path / "e6.json", {"atlas": ["no_commas"], "birch": ["no_commas"]}, depth=6)
    args = ["eval", "compare", "--shapes", str(shapes), shallow, deep, "--out", str(tmp_path / "cmp.json")]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    out = json.loads((tmp_path / "cmp.json").read_text())
    assert [(r["rule"], r["model"], r["depth"]) for r in out["rules"]] == [("no_commas", "atlas", 1)]
    assert out["unmatched"] == {
        "eval_checkpoints": ["no_commas · atlas @ 6 (5-8)", "no_commas · birch @ 6"],
        "production_rules": ["tone"],
    }
    assert any("no_commas · birch @ 6" in n for n in out["notes"]), out["notes"]
    assert any(s.startswith("warning: eval checkpoints") for s in res.stderr.splitlines()), res.stderr
    assert CliRunner().invoke(main, [*args, "--strict"]).exit_code == 4


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda d: d.update(cells="x"), "matrix.json: cells: expected a list"),
        (
            lambda d: d["cells"][0].update(prefix_model=5),
            "matrix.json: cells[0].prefix_model: expected a string",
        ),
        (lambda d: d["cells"][1].pop("model"), "matrix.json: cells[1].model: missing"),
        (
            lambda d: d.update(version=0),
            "matrix.json: version: unsupported handoffmon.switch_matrix version 0",
        ),
    ],
)
def test_a_broken_switch_matrix_names_file_and_key(tmp_path: Path, edit: Any, says: str) -> None:
    """A hand-edited matrix used to crash compare with a traceback (cells as a string, a number as a
    model name) or be read at version 0; now exit 1 naming the file and key, nothing written."""
    shapes = _shapes(tmp_path / "shapes.json", ["atlas", "birch"])
    cells = [
        CellScore(f"e{i}", a, b, float((i + len(a + b)) % 2), (a, b), 1)
        for i in range(6)
        for a in ("atlas", "birch")
        for b in ("atlas", "birch")
    ]
    doc = json.loads(analyse(cells, resamples=200, min_n=2).to_json())
    edit(doc)
    (tmp_path / "matrix.json").write_text(json.dumps(doc), encoding="utf-8")
    args = [
        "eval",
        "compare",
        "--shapes",
        shapes,
        str(tmp_path / "matrix.json"),
        "--out",
        str(tmp_path / "c.json"),
    ]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.output
    assert f"error: {tmp_path / says}" in res.stderr, res.stderr
    assert not (tmp_path / "c.json").exists()
