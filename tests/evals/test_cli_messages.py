"""eval switch-matrix / compare: errors say what is wrong, and a refused compare writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from handoffmon.cli import main
from handoffmon.evals.results import build_result
from handoffmon.evals.script import script_from_dict
from handoffmon.evals.store import Row
from tests.evals.test_eval_scope import _eval_doc, _shapes


def test_switch_matrix_names_models_that_resolve_to_one_model(tmp_path: Path) -> None:
    """Simulator: atlas is the author behind group general; both as --models is named, before any call."""
    script = tmp_path / "s.yaml"
    script.write_text(
        yaml.safe_dump(
            {
                "id": "dup",
                "runs": 2,
                "rules": [{"name": "no_commas", "check": "no_commas"}],
                "turns": [{"user": "Hi", "checkpoint": True}, {"user": "And now?", "checkpoint": True}],
            }
        ),
        encoding="utf-8",
    )
    base = ["eval", "switch-matrix", str(script), "--router", "sim", "--no-progress", "--min-n", "2"]
    files = ["--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "m.json")]
    res = CliRunner().invoke(main, [*base, *files, "--models", "general,atlas,experimental"])
    assert res.exit_code == 1, res.output
    assert "general and atlas resolve to the same model (group) 'general'" in res.output, res.output
    assert (
        "min-n" not in res.output and not (tmp_path / "cache").exists() and not (tmp_path / "m.json").exists()
    )
    twice = CliRunner().invoke(main, [*base, *files, "--models", "general,experimental,general"])
    assert twice.exit_code == 1 and "general is given 2 times" in twice.output, twice.output
    ok = CliRunner().invoke(main, [*base, *files, "--models", "general,experimental"])
    assert ok.exit_code == 0, ok.output  # the control: distinct models make a matrix


def test_compare_model_that_answered_no_checkpoint_says_so(tmp_path: Path) -> None:
    """cedar answered turn 1 of every run (a fallback), atlas the checkpoint at turn 2: --model cedar
    names the eval's missing checkpoint rows, not production."""
    shapes = _shapes(tmp_path / "shapes.json", ["atlas", "cedar"])
    script = script_from_dict(
        {
            "id": "fb",
            "rules": [{"name": "no_commas", "check": "no_commas"}],
            "turns": [{"user": "t1"}, {"user": "t2", "checkpoint": True}],
        }
    )
    rows = [
        Row("fb", "group", run, turn, "no_commas", "pass", "", None, turn == 2, False, author, 1)
        for run in range(10)
        for turn, author in ((1, "cedar"), (2, "atlas"))
    ]
    ev = tmp_path / "eval.json"
    ev.write_text(build_result(rows, [script], str(ev)).to_json(), encoding="utf-8")
    args = ["eval", "compare", "--shapes", shapes, str(ev)]
    res = CliRunner().invoke(main, [*args, "--model", "cedar"])
    assert res.exit_code == 4, res.output
    assert "the eval has no checkpoint rows for cedar (it answered 10 turn(s)" in res.output, res.output
    assert "production data to compare with" not in res.output
    atlas = CliRunner().invoke(main, [*args, "--model", "atlas"])
    assert atlas.exit_code in (0, 3) and "compared 1 (rule, model, depth)" in atlas.output, atlas.output


def test_compare_html_with_two_eval_results_writes_nothing(tmp_path: Path) -> None:
    """--html needs one eval result: with two, exit 1 before --out is written (and no page either)."""
    shapes = _shapes(tmp_path / "shapes.json", ["atlas"])
    one = _eval_doc(tmp_path / "one.json", {"atlas": ["no_commas"]})
    two = _eval_doc(tmp_path / "two.json", {"atlas": ["no_commas"]})
    out, html = tmp_path / "cmp.json", tmp_path / "cmp.html"
    args = ["eval", "compare", "--shapes", shapes, one, two, "--out", str(out)]
    res = CliRunner().invoke(main, [*args, "--html", str(html)])
    assert res.exit_code == 1 and "--html needs exactly one eval run result" in res.output, res.output
    assert not out.exists() and not html.exists()
    ok = CliRunner().invoke(main, args)  # the control: without --html the two results compare
    assert ok.exit_code in (0, 3) and out.exists(), ok.output


def _one_turn_script(tmp_path: Path) -> Path:
    """s.yaml: one checked turn, one rule, one run."""
    script = tmp_path / "s.yaml"
    rule = {"name": "no_commas", "check": "no_commas"}
    doc = {"id": "u", "runs": 1, "rules": [rule], "turns": [{"user": "Hi", "checkpoint": True}]}
    script.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return script


@pytest.mark.slow
def test_eval_run_names_a_script_or_router_nested_thousands_deep(tmp_path: Path) -> None:
    """YAML 100,000 levels deep as the script or the --router: exit 1 naming that file, nothing written."""
    deep = "[" * 100_000 + "]" * 100_000
    good = _one_turn_script(tmp_path)
    bad_script, bad_router = tmp_path / "deep.yaml", tmp_path / "router.yaml"
    bad_script.write_text(f"id: d\nturns: {deep}\n", encoding="utf-8")
    bad_router.write_text(f"model_list: {deep}\n", encoding="utf-8")
    out = ["--db", str(tmp_path / "e.sqlite"), "--out", str(tmp_path / "e.json"), "--no-progress"]
    for script, router, named in ((bad_script, "sim", bad_script), (good, str(bad_router), bad_router)):
        res = CliRunner().invoke(main, ["eval", "run", str(script), "--router", router, "--model", "m", *out])
        assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.output
        assert str(named) in res.output and "nested too deeply" in res.output, res.output
        assert not (tmp_path / "e.sqlite").exists() and not (tmp_path / "e.json").exists()


def test_eval_run_with_an_unknown_sim_model_lists_the_groups_and_creates_no_database(tmp_path: Path) -> None:
    """The simulator's groups (general, ...) are what the docs tell users to request; the error used to
    list only the authors, and left an empty --db behind."""
    script = _one_turn_script(tmp_path)
    db = tmp_path / "e.sqlite"
    res = CliRunner().invoke(
        main,
        [
            *("eval", "run", str(script), "--router", "sim", "--model", "nosuch"),
            "--db",
            str(db),
            "--no-progress",
        ],
    )
    assert res.exit_code == 1 and "unknown simulated model 'nosuch'" in res.output, res.output
    assert "groups: general, fast, reasoning, budget, experimental, backup" in res.output, res.output
    assert "models: atlas," in res.output and not db.exists(), res.output


def test_switch_matrix_over_few_scripts_warns_that_its_intervals_are_too_narrow(tmp_path: Path) -> None:
    """Scripts are resampled as clusters: with 2 to 5 the intervals undercover (measured 87% at 2
    scripts, 92% at 4, for a nominal 95%), so the run says so; one script (episodes only) does not."""
    base = ["eval", "switch-matrix", "--router", "sim:3", "--models", "sim-00,sim-01", "--no-progress"]
    opts = [
        "--min-n",
        "2",
        "--runs",
        "2",
        "--cache",
        str(tmp_path / "cache"),
        "--out",
        str(tmp_path / "m.json"),
    ]
    one = _one_turn_script(tmp_path)
    other = tmp_path / "t.yaml"
    other.write_text(one.read_text().replace("id: u", "id: v"), encoding="utf-8")
    two = CliRunner().invoke(main, [*base, str(one), str(other), *opts])
    assert two.exit_code == 0 and "episodes in 2 script(s)" in two.output, two.output
    assert "warning: the matrix's episodes come from 2 scripts" in two.output, two.output
    single = CliRunner().invoke(main, [*base, str(one), *opts])
    assert single.exit_code == 0 and "in 1 script(s)" in single.output, single.output
    assert "warning:" not in single.output, single.output


def test_eval_run_with_shapes_of_other_models_still_writes_its_page(tmp_path: Path) -> None:
    """Production shapes that share no (rule, author) with the run: the eval ran and its page is
    written (no overlay) with a warning, exit 0; it used to exit 4 after the whole run, --html unwritten."""
    cells = tmp_path / "cells.csv"
    cells.write_text(
        "rule,model,prefix_model,depth_bucket,n,passes\nno_commas,zzz,none,1,50,30\n", encoding="utf-8"
    )
    shapes = tmp_path / "shapes.json"
    assert (
        CliRunner().invoke(main, ["shapes", "export", "--source", str(cells), "--out", str(shapes)]).exit_code
        == 0
    )
    files = {k: tmp_path / f"e.{k}" for k in ("sqlite", "json", "html")}
    res_args = [
        *("eval", "run", str(_one_turn_script(tmp_path)), "--router", "sim", "--model", "general"),
        *("--db", str(files["sqlite"]), "--out", str(files["json"]), "--html", str(files["html"])),
        *("--shapes", str(shapes), "--no-progress"),
    ]
    res = CliRunner().invoke(main, res_args)
    assert res.exit_code == 0, res.output
    assert "warning: --shapes: no (rule, author, depth) of the eval has production data" in res.output
    assert "production models: zzz" in res.output and all(p.exists() for p in files.values()), res.output
    assert "drift eval" in files["html"].read_text(encoding="utf-8")
    for f in files.values():
        f.unlink()
    doc = json.loads(shapes.read_text(encoding="utf-8"))
    shapes.write_text(json.dumps({**doc, "rules": []}), encoding="utf-8")  # no checks at all: known up front
    empty = CliRunner().invoke(main, res_args)
    assert empty.exit_code == 4 and f"error: {shapes}: the shapes hold no production checks" in empty.output
    assert not any(p.exists() for p in files.values()), empty.output
