"""Hand-edited or truncated shapes / eval JSON: an error naming the file and key, exit 1, no traceback."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from handoffmon.cli import main

SCRIPT = {
    "id": "val",
    "runs": 4,
    "rules": [{"name": "no_commas", "check": "no_commas"}],
    "turns": [{"user": q, "checkpoint": True} for q in ("Where is my order?", "And now?", "And then?")],
}


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real eval result (simulator) and real production shapes (a cells CSV) of its author."""
    tmp = tmp_path_factory.mktemp("docs")
    script = tmp / "val.yaml"
    script.write_text(yaml.safe_dump(SCRIPT), encoding="utf-8")
    run = CliRunner().invoke(
        main,
        [
            *("eval", "run", str(script), "--router", "sim:3", "--model", "sim-00", "--no-progress"),
            *("--db", str(tmp / "e.sqlite"), "--out", str(tmp / "eval.json")),
        ],
    )
    assert run.exit_code == 0, run.output
    ev = json.loads((tmp / "eval.json").read_text())
    (author,) = ev["authors"]["group-00"]
    cells = tmp / "cells.csv"
    rows = [
        (f"{author},none,1", 400, 390),
        (f"{author},{author},2", 300, 240),
        (f"{author},{author},3-4", 500, 300),
    ]
    cells.write_text(
        "rule,model,prefix_model,depth_bucket,n,passes\n"
        + "".join(f"no_commas,{cell},{n},{p}\n" for cell, n, p in rows),
        encoding="utf-8",
    )
    exp = CliRunner().invoke(
        main, ["shapes", "export", "--source", str(cells), "--out", str(tmp / "shapes.json")]
    )
    assert exp.exit_code == 0, exp.output
    return {"eval": ev, "shapes": json.loads((tmp / "shapes.json").read_text())}


def _compare(tmp_path: Path, shapes: dict[str, Any], ev: dict[str, Any]) -> Any:
    (tmp_path / "shapes.json").write_text(json.dumps(shapes), encoding="utf-8")
    (tmp_path / "eval.json").write_text(json.dumps(ev), encoding="utf-8")
    return CliRunner().invoke(
        main,
        [
            *("eval", "compare", "--shapes", str(tmp_path / "shapes.json"), str(tmp_path / "eval.json")),
            *("--out", str(tmp_path / "cmp.json")),
        ],
    )


def test_the_untouched_documents_compare(tmp_path: Path, docs: dict[str, Any]) -> None:
    """The control: the real documents read and compare (exit 0 or 3), with unknown extra keys ignored."""
    res = _compare(tmp_path, docs["shapes"], docs["eval"])
    assert res.exit_code in (0, 3), res.output
    assert json.loads((tmp_path / "cmp.json").read_text())["rules"]
    shapes, ev = copy.deepcopy(docs["shapes"]), copy.deepcopy(docs["eval"])
    shapes["rules"][0]["from_a_newer_writer"] = 1
    shapes["session_lengths"]["p999"] = 40
    shapes["handoff_pairs"].append({"prefix_model": "a", "model": "b", "turns": 3, "share": 1.0, "x": 1})
    ev["curves"][0]["from_a_newer_writer"] = {"k": 1}
    ev["scripts"][0]["note"] = "hand-edited"
    again = _compare(tmp_path, shapes, ev)
    assert again.exit_code == res.exit_code, again.output


Edit = Callable[[dict[str, Any]], None]


def _set(path: tuple[Any, ...], value: Any) -> Edit:
    def edit(doc: dict[str, Any]) -> None:
        obj = doc
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value

    return edit


def _truncate(path: tuple[Any, ...]) -> Edit:
    def edit(doc: dict[str, Any]) -> None:
        obj = doc
        for k in path:
            obj = obj[k]
        del obj[-1]

    return edit


def _drop(path: tuple[Any, ...]) -> Edit:
    def edit(doc: dict[str, Any]) -> None:
        obj = doc
        for k in path[:-1]:
            obj = obj[k]
        del obj[path[-1]]

    return edit


PAIR = {"prefix_model": "a", "model": "b", "turns": 1, "share": "0.5"}
SHAPES_CASES = [
    ("n shorter than buckets", _truncate(("rules", 0, "n")), "rules[0].n", "but buckets has"),
    ("adherence shorter", _truncate(("rules", 1, "adherence")), "rules[1].adherence", "but buckets has"),
    ("bucket label x", _set(("buckets", 1), "x"), "buckets[1]", "not a depth bucket label"),
    ("buckets out of order", lambda d: d["buckets"].reverse(), "buckets", "not contiguous"),
    ("p90 as a string", _set(("session_lengths", "p90"), "16"), "session_lengths.p90", "expected a number"),
    ("n as a string", _set(("rules", 0, "n", 0), "400"), "rules[0].n[0]", "expected an integer"),
    ("passes above n", _set(("rules", 0, "passes", 0), 10**6), "rules[0].passes[0]", "passes out of n"),
    ("adherence as a string", _set(("rules", 0, "adherence", 0), "0.9"), "rules[0].adherence[0]", "number"),
    ("markov p_tf a list", _set(("rules", 0, "markov"), {"p_tf": [0.1]}), "rules[0].markov.p_tf", "number"),
    ("rules not a list", _set(("rules",), {"a": 1}), "rules", "expected a list"),
    ("a rule without its model", _drop(("rules", 0, "model")), "rules[0].model", "missing"),
    ("pair share as a string", _set(("handoff_pairs",), [PAIR]), "handoff_pairs[0].share", "number"),
    # values that type-check but cannot be: each used to be compared (p_tf 7 moved production to 2e11,
    # p_tf -0.5 flagged a clean eval), plotted, or read twice
    ("markov p_tf above 1", _set(("rules", 0, "markov"), {"p_tf": 7.0, "p_ft": 0.1}), "rules[0].markov.p_tf",
     "in [0, 1]"),
    ("markov p_ft below 0", _set(("rules", 0, "markov"), {"p_tf": 0.1, "p_ft": -0.5}), "rules[0].markov.p_ft",
     "in [0, 1]"),
    ("markov half-life below 0", _set(("rules", 0, "markov"), {"half_life_turns": -3}),
     "rules[0].markov.half_life_turns", "≥ 0"),
    ("adherence not passes/n", _set(("rules", 0, "adherence", 0), 0.1), "rules[0].adherence[0]", "passes/n"),
    ("adherence null with n > 0", _set(("rules", 0, "adherence", 0), None), "rules[0].adherence[0]",
     "passes/n"),
    ("interval above its adherence", _set(("rules", 0, "ci_low", 0), 0.99), "rules[0].ci_low[0]",
     "interval"),
    ("interval outside [0, 1]", _set(("rules", 0, "ci_high", 0), 4.0), "rules[0].ci_high[0]", "in [0, 1]"),
    ("a rule and model twice", lambda d: d["rules"].insert(1, copy.deepcopy(d["rules"][0])), "rules[1]",
     "also rules[0]"),
    ("version 0", _set(("version",), 0), "version", "unsupported"),
    ("version true", _set(("version",), True), "version", "unsupported"),
]  # fmt: skip

EVAL_CASES = [
    ("depth as a string", _set(("curves", 0, "depth"), "6"), "curves[0].depth", "expected an integer"),
    ("n as a float", _set(("curves", 0, "n"), 2.5), "curves[0].n", "expected an integer"),
    ("adherence as a string", _set(("curves", 0, "adherence"), "1"), "curves[0].adherence", "number"),
    ("a curve without its rule", _drop(("curves", 0, "rule")), "curves[0].rule", "missing"),
    ("checkpoints as a string", _set(("scripts", 0, "checkpoints"), "1,2"), "scripts[0].checkpoints", "list"),
    ("verdicts as a list", _set(("verdicts",), [1]), "verdicts", "expected an object"),
    ("authors' counts as strings", _set(("authors", "group-00"), {"sim-00": "12"}), "authors.group-00.sim-00",
     "expected an integer"),
    ("adherence not passes/n", _set(("curves", 0, "adherence"), 0.01), "curves[0].adherence", "passes/n"),
    ("interval outside [0, 1]", _set(("curves", 0, "ci_low"), -2.0), "curves[0].ci_low", "in [0, 1]"),
    ("a curve point twice", lambda d: d["curves"].insert(1, copy.deepcopy(d["curves"][0])), "curves[1]",
     "also curves[0]"),
    ("version 0", _set(("version",), 0), "version", "unsupported"),
    ("version true", _set(("version",), True), "version", "unsupported"),
]  # fmt: skip


CASES = [("shapes", *c) for c in SHAPES_CASES] + [("eval", *c) for c in EVAL_CASES]


@pytest.mark.parametrize(
    ("doc", "what", "edit", "key", "says"), CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES]
)
def test_a_broken_document_names_file_and_key(
    tmp_path: Path, docs: dict[str, Any], doc: str, what: str, edit: Edit, key: str, says: str
) -> None:
    """One edit of the shapes or the eval result: compare exits 1 naming the file and key, writes nothing."""
    broken = {k: copy.deepcopy(v) for k, v in docs.items()}
    edit(broken[doc])
    res = _compare(tmp_path, broken["shapes"], broken["eval"])
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), (what, res.output)
    assert f"error: {tmp_path / f'{doc}.json'}: {key}: " in res.output and says in res.output, res.output
    assert not (tmp_path / "cmp.json").exists()


def test_eval_run_reads_its_shapes_before_any_model_call(tmp_path: Path, docs: dict[str, Any]) -> None:
    """`eval run --shapes` with a truncated rule: exit 1 naming the key; no database, no --out."""
    shapes = copy.deepcopy(docs["shapes"])
    _truncate(("rules", 0, "passes"))(shapes)
    (tmp_path / "shapes.json").write_text(json.dumps(shapes), encoding="utf-8")
    script = tmp_path / "val.yaml"
    script.write_text(yaml.safe_dump(SCRIPT), encoding="utf-8")
    res = CliRunner().invoke(
        main,
        [
            *("eval", "run", str(script), "--router", "sim:3", "--model", "sim-00", "--no-progress"),
            *("--db", str(tmp_path / "e.sqlite"), "--out", str(tmp_path / "eval.json")),
            *("--html", str(tmp_path / "eval.html"), "--shapes", str(tmp_path / "shapes.json")),
        ],
    )
    assert res.exit_code == 1 and "rules[0].passes: " in res.output, res.output
    assert not any(
        p.exists() for p in (tmp_path / "e.sqlite", tmp_path / "eval.json", tmp_path / "eval.html")
    )


@pytest.mark.parametrize("doc", ["shapes", "eval"])
def test_a_document_nested_thousands_deep_is_named(tmp_path: Path, docs: dict[str, Any], doc: str) -> None:
    """100,000 nested lists (the parser recurses per level): exit 1 naming the file, not 'an input file'."""
    (tmp_path / "shapes.json").write_text(json.dumps(docs["shapes"]), encoding="utf-8")
    (tmp_path / "eval.json").write_text(json.dumps(docs["eval"]), encoding="utf-8")
    (tmp_path / f"{doc}.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    res = CliRunner().invoke(
        main,
        [
            *("eval", "compare", "--shapes", str(tmp_path / "shapes.json"), str(tmp_path / "eval.json")),
            *("--out", str(tmp_path / "cmp.json")),
        ],
    )
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.output
    assert f"error: {tmp_path / f'{doc}.json'}: nested too deeply" in res.output, res.output
    assert not (tmp_path / "cmp.json").exists()
