"""Every command as a careless user or an attacker runs it: missing, empty, corrupt and binary
inputs, outputs that cannot be written, NaN options, inputs with no result. Each ends with one
``error:`` line and a documented exit code (``cli/exits.py``), never a traceback; an empty result
is exit 4, never a silent success."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result

from handoffmon.cli import main
from handoffmon.cli.exits import ExitCode

GARBAGE = b"\xb0\x9f\x00\xff\xfe\x80garbage\n\xc3\x28"


def _run(args: list[str]) -> Result:
    return CliRunner().invoke(main, args)


def _user_error(res: Result, code: ExitCode = ExitCode.ERROR) -> str:
    """The command ended with ``code`` and an ``error:`` line, not a traceback."""
    assert res.exit_code == code, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output
    assert "error: " in res.stderr, res.stderr
    return res.stderr


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    f = {
        "rules": tmp_path / "rules.yaml",
        "replies": tmp_path / "replies.jsonl",
        "binary": tmp_path / "garbage.jsonl",
        "cells": tmp_path / "cells.csv",
        "zero_cells": tmp_path / "zero.csv",
        "scores": tmp_path / "scores.csv",
    }
    f["rules"].write_text("rules:\n  - {name: short, check: length, params: {unit: words, max: 5}}\n")
    f["replies"].write_text('{"reply": "hello there"}\n{"reply": "one two three four five six seven"}\n')
    f["binary"].write_bytes(GARBAGE)
    header = "rule,prefix_model,model,depth_bucket,n,passes\n"
    f["cells"].write_text(header + "r,a,b,1,50,40\nr,b,b,1,50,45\nr,b,a,1,50,30\nr,a,a,1,50,44\n")
    f["zero_cells"].write_text(header + "r,a,b,1,0,0\nr,b,b,1,0,0\n")
    rng = np.random.default_rng(0)
    rows = ["episode,prefix_model,suffix_model,score"]
    rows += [f"e{i},{a},{b},{rng.random():.3f}" for i in range(3) for a in "ab" for b in "ab"]
    f["scores"].write_text("\n".join(rows) + "\n")
    return f


# -- outputs that cannot be written: checked before the work, no traceback ---------------------


def test_outputs_in_a_missing_directory_fail_before_the_work(tmp_path: Path, files: dict[str, Path]) -> None:
    nowhere = str(tmp_path / "no" / "such" / "dir" / "out")
    refit_json = tmp_path / "refit.json"
    assert _run(["refit", "--source", str(files["cells"]), "--out", str(refit_json)]).exit_code == 0
    commands = [
        ["check", "--rules", str(files["rules"]), "--input", str(files["replies"]), "--output", nowhere],
        ["refit", "--source", str(files["cells"]), "--out", nowhere],
        ["refit", "--source", str(files["cells"]), "--out", str(tmp_path / "r2.json"),
         "--metrics-file", nowhere],
        ["shapes", "export", "--source", str(files["cells"]), "--out", nowhere],
        ["stats", "switch-matrix", "--scores", str(files["scores"]), "--out", nowhere, "--min-n", "2",
         "--resamples", "100"],
        ["report", str(refit_json), "--out", nowhere],
    ]  # fmt: skip
    for args in commands:
        err = _user_error(_run(args))
        assert "does not exist" in err, (args, err)
    assert not list(tmp_path.glob("**/*.tmp"))


def test_ifeval_checks_its_output_before_scoring(tmp_path: Path) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"key": 1, "prompt": "p", "instruction_id_list": ["punctuation:no_comma"],
                               "kwargs": [{}]}) + "\n")  # fmt: skip
    resp = tmp_path / "resp.jsonl"
    resp.write_text(json.dumps({"prompt": "p", "response": "no commas here"}) + "\n")
    err = _user_error(_run(["ifeval", "--input", str(inp), "--responses", str(resp), "--output",
                            str(tmp_path / "missing" / "o.jsonl")]))  # fmt: skip
    assert "--output" in err
    out = tmp_path / "o.jsonl"
    res = _run(["ifeval", "--input", str(inp), "--responses", str(resp), "--output", str(out)])
    assert res.exit_code == 0 and json.loads(out.read_text())["follow_all_instructions"] is True


def test_eval_run_checks_its_outputs_before_any_model_call(tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text("id: s\nruns: 1\nrules: [{name: r, check: no_commas}]\nturns: [{user: hi}]\n")
    db = tmp_path / "e.sqlite"
    for option in ("--out", "--jsonl", "--html"):
        res = _run(["eval", "run", str(script), "--model", "atlas", "--router", "sim", "--db", str(db),
                    "--no-progress", option, str(tmp_path / "missing" / "x")])  # fmt: skip
        assert option in _user_error(res)
    assert not db.exists()  # nothing ran


# -- inputs: binary garbage, a directory, a missing file ---------------------------------------


def test_binary_inputs_are_user_errors_naming_the_file(tmp_path: Path, files: dict[str, Path]) -> None:
    garbage = str(files["binary"])
    for args in (
        ["check", "--rules", str(files["rules"]), "--input", garbage],
        ["check", "--rules", garbage, "--input", str(files["replies"])],
        ["report", garbage, "--out", str(tmp_path / "r.html")],
        ["refit", "--source", str(files["cells"]), "--out", str(tmp_path / "r.json"), "--config", garbage],
        ["serve", "--upstream", "http://127.0.0.1:9", "--config", garbage],
    ):
        err = _user_error(_run(args))
        assert "UTF-8" in err and garbage in err, (args, err)


def test_binary_files_no_command_catches_still_end_in_one_error_line(tmp_path: Path) -> None:
    """An eval script of binary garbage (read deep in the evals package): exit 1, no traceback."""
    garbage = tmp_path / "s.yaml"
    garbage.write_bytes(GARBAGE)
    res = _run(["eval", "run", str(garbage), "--model", "atlas", "--router", "sim", "--db",
                str(tmp_path / "e.sqlite"), "--no-progress"])  # fmt: skip
    assert "not UTF-8 text" in _user_error(res)


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_a_missing_file_or_a_directory_is_exit_1_in_every_command(tmp_path: Path, kind: str) -> None:
    """click's own check (exists=True, dir_okay=False) exited 2, the usage-error code, in some
    commands, while the others said 1 for the same mistake."""
    path = tmp_path / "x.json"
    if kind == "directory":
        path.mkdir()
    p = str(path)
    for args in (
        ["report", p],
        ["config", "check", p],
        ["check", "--rules", p, "--input", p],
        ["eval", "compare", "--shapes", p, p],
        ["stats", "switch-matrix", "--scores", p, "--out", str(tmp_path / "m.json")],
    ):
        _user_error(_run(args))


# -- options: NaN, infinity, out of range ------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_number_options_are_usage_errors(
    tmp_path: Path, files: dict[str, Path], value: str
) -> None:
    """click's FloatRange lets NaN through (every comparison is false): `--ridge nan` died in numpy."""
    out = str(tmp_path / "o.json")
    for args in (
        ["stats", "switch-matrix", "--scores", str(files["scores"]), "--out", out, "--ridge", value],
        ["stats", "switch-matrix", "--scores", str(files["scores"]), "--out", out, "--confidence", value],
        ["refit", "--source", str(files["cells"]), "--out", out, "--confidence", value],
        ["refit", "--source", str(files["cells"]), "--out", out, "--prior-sd-pp", value],
        ["shapes", "export", "--source", str(files["cells"]), "--out", out, "--confidence", value],
        ["check", "--rules", str(files["rules"]), "--input", str(files["replies"]), "--budget-s", value],
        ["eval", "compare", "--shapes", str(files["cells"]), str(files["cells"]), "--alpha", value],
    ):
        res = _run(args)
        assert res.exit_code == ExitCode.USAGE, (args, res.output)
        assert "is not a finite number" in res.output or "not in the range" in res.output
    assert not Path(out).exists()


def test_check_budget_must_be_positive(files: dict[str, Path]) -> None:
    """--budget-s -1 turned every verdict into an error, and the run still exited 0."""
    res = _run(
        ["check", "--rules", str(files["rules"]), "--input", str(files["replies"]), "--budget-s", "-1"]
    )
    assert res.exit_code == ExitCode.USAGE


def test_refit_overrides_out_of_range_name_the_option(tmp_path: Path, files: dict[str, Path]) -> None:
    """A pydantic dump (`confidence\\n  Input should be less than 1 [type=less_than, ...`) became one line."""
    for option, value in (("--confidence", "2"), ("--min-n", "0"), ("--fdr", "1"), ("--prior-sd-pp", "-1")):
        res = _run(
            ["refit", "--source", str(files["cells"]), "--out", str(tmp_path / "r.json"), option, value]
        )
        err = _user_error(res)
        assert err.startswith(f"error: {option} ") and "errors.pydantic.dev" not in err, err


def test_eval_sim_router_size_is_checked(tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text("id: s\nruns: 1\nrules: [{name: r, check: no_commas}]\nturns: [{user: hi}]\n")
    for router in ("sim:abc", "sim:0", "sim:1"):
        res = _run(["eval", "run", str(script), "--model", "atlas", "--router", router, "--db",
                    str(tmp_path / "e.sqlite"), "--no-progress"])  # fmt: skip
        assert "'sim:K' takes a fleet size" in _user_error(res)


def test_eval_sim_latency_must_be_finite_and_not_negative(tmp_path: Path) -> None:
    for value in ("-1", "nan"):
        res = _run(["eval", "run", "--model", "atlas", "--router", "sim", "--sim-latency", value])
        assert res.exit_code == ExitCode.USAGE and "--sim-latency" in res.output


# -- empty results are exit 4, never a silent success ------------------------------------------


def test_check_with_no_rule_in_scope_of_any_reply_is_no_data(tmp_path: Path, files: dict[str, Path]) -> None:
    """Every reply at depth 1, the rule from depth 3 on: an all-dash table and exit 0 before."""
    rules = tmp_path / "scoped.yaml"
    rules.write_text("rules:\n  - {name: deep, check: no_commas, scope: {min_depth: 3}}\n")
    out = tmp_path / "verdicts.jsonl"
    res = _run(["check", "--rules", str(rules), "--input", str(files["replies"]), "--output", str(out)])
    assert "no rule applied" in _user_error(res, ExitCode.NO_DATA)
    assert not out.exists()


def test_refit_of_cells_that_count_zero_checks_is_no_data(tmp_path: Path, files: dict[str, Path]) -> None:
    """Rows with n = 0 are no checks: a refit of nothing was written and exited 0."""
    out = tmp_path / "r.json"
    res = _run(["refit", "--source", str(files["zero_cells"]), "--out", str(out)])
    assert "no checks to refit" in _user_error(res, ExitCode.NO_DATA)
    assert not out.exists()


def test_report_of_a_refit_without_fits_is_no_data(tmp_path: Path, files: dict[str, Path]) -> None:
    refit_json = tmp_path / "refit.json"
    assert _run(["refit", "--source", str(files["cells"]), "--out", str(refit_json)]).exit_code == 0
    doc = json.loads(refit_json.read_text())
    doc["rules"] = {}
    refit_json.write_text(json.dumps(doc))
    out = tmp_path / "r.html"
    res = _run(["report", str(refit_json), "--out", str(out)])
    assert "holds no fit" in _user_error(res, ExitCode.NO_DATA)
    assert not out.exists()


def test_stats_switch_matrix_with_no_pair_reaching_min_n_is_no_data(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    """3 episodes, --min-n 20: every Δ is NaN; `eval switch-matrix` already said exit 4 for this."""
    out = tmp_path / "m.json"
    res = _run(
        ["stats", "switch-matrix", "--scores", str(files["scores"]), "--out", str(out), "--resamples", "100"]
    )
    assert "no prefix->suffix pair reached --min-n 20" in _user_error(res, ExitCode.NO_DATA)
    assert not out.exists()
    res = _run(["stats", "switch-matrix", "--scores", str(files["scores"]), "--out", str(out),
                "--resamples", "100", "--min-n", "2"])  # fmt: skip
    assert res.exit_code == 0 and out.exists()


def test_a_csv_given_to_the_wrong_command_says_what_it_is(tmp_path: Path, files: dict[str, Path]) -> None:
    """A switch-matrix scores CSV given as `shapes export --source` (read as a cells CSV) said only
    "missing column(s) rule, model, …"; its header names the kind of file and its command. The
    other way round too, and a CSV of no known kind gets no guess."""
    out = tmp_path / "shapes.json"
    err = _user_error(_run(["shapes", "export", "--source", str(files["scores"]), "--out", str(out)]))
    assert err == (
        f"error: {files['scores']}: line 1: missing column(s) rule, model, depth_bucket, n, passes; by its "
        "header (episode, prefix_model, suffix_model, score) this is a switch-matrix scores CSV, read by "
        "`handoffmon stats switch-matrix --scores`\n"
    )
    assert not out.exists()
    err = _user_error(_run(["stats", "switch-matrix", "--scores", str(files["cells"]), "--out", str(out)]))
    assert "missing column(s) episode, suffix_model, score; by its header" in err
    assert "this is a cells CSV, read by `handoffmon refit --source` and `shapes export --source`" in err
    other = tmp_path / "other.csv"
    other.write_text("episode,prefix_model,score\ne1,a,1\n")
    err = _user_error(_run(["shapes", "export", "--source", str(other), "--out", str(out)]))
    assert err == f"error: {other}: line 1: missing column(s) rule, model, depth_bucket, n, passes\n"


def test_report_of_another_commands_document_points_to_its_html_report(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    """`handoffmon report matrix.json` said only "not a handoffmon.refit document"; a switch matrix
    and an eval run result have HTML reports of their own, which the error names."""
    from tests.evals.test_eval_scope import _eval_doc

    matrix = tmp_path / "matrix.json"
    res = _run(["stats", "switch-matrix", "--scores", str(files["scores"]), "--out", str(matrix),
                "--resamples", "100", "--min-n", "2"])  # fmt: skip
    assert res.exit_code == 0, res.output
    out = tmp_path / "r.html"
    err = _user_error(_run(["report", str(matrix), "--out", str(out)]))
    assert err.startswith(f"error: {matrix}: not a handoffmon.refit document: this is a switch matrix"), err
    assert "`handoffmon eval switch-matrix ... --html PATH`" in err
    evaluation = _eval_doc(tmp_path / "eval.json", {"atlas": ["no_commas"]})
    err = _user_error(_run(["report", evaluation, "--out", str(out)]))
    assert "this is an eval run result" in err and "`eval run ... --html PATH`" in err, err
    assert not out.exists()
    other = tmp_path / "other.json"
    other.write_text('{"schema": ["handoffmon.switch_matrix"]}')  # not a string: no guess, no traceback
    assert _user_error(_run(["report", str(other), "--out", str(out)])) == (
        f"error: {other}: not a handoffmon.refit document\n"
    )


def test_eval_run_with_an_empty_multi_if_csv_is_no_data_not_a_usage_error(tmp_path: Path) -> None:
    """A header-only CSV said "give SCRIPTS ... and/or --multi-if CSV" (exit 2) though one was given."""
    csv = tmp_path / "multi_if.csv"
    csv.write_text("key,turn_1_prompt\n")
    res = _run(["eval", "run", "--model", "atlas", "--router", "sim", "--multi-if", str(csv), "--db",
                str(tmp_path / "e.sqlite"), "--no-progress"])  # fmt: skip
    assert str(csv) in _user_error(res, ExitCode.NO_DATA)


def test_a_commands_own_click_error_reads_like_every_other_error(tmp_path: Path) -> None:
    """`demo --serve` on a busy port said 'Error: ...' (click's ClickException), every other
    command 'error: ...'; still exit 1, and usage errors stay click's (exit 2)."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        res = _run(
            ["demo", "--serve", str(port), "--size", "0.01", "--no-progress", "--out-dir", str(tmp_path)]
        )
    err = _user_error(res)
    assert err == f"error: --serve {port}: cannot listen on 127.0.0.1:{port}: address already in use\n"
    script = tmp_path / "s.yaml"
    script.write_text("id: s\nruns: 1\nrules: [{name: r, check: no_commas}]\nturns: [{user: hi}]\n")
    usage = _run(
        ["eval", "switch-matrix", "--models", "atlas", "--out", str(tmp_path / "m.json"), str(script)]
    )
    assert usage.exit_code == ExitCode.USAGE and "Error: --models needs at least two models" in usage.output


def test_deeply_nested_json_is_a_user_error_not_a_recursion_traceback(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    """200,000 nested brackets: json.loads raises RecursionError (no ValueError), which every
    reader let through as a traceback."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000 + "\n")
    for args, named in (
        (["check", "--rules", str(files["rules"]), "--input", str(deep)], True),
        (["report", str(deep), "--out", str(tmp_path / "r.html")], True),
        (["ifeval", "--input", str(deep), "--responses", str(deep), "--output", str(tmp_path / "o")], True),
        (["eval", "compare", "--shapes", str(deep), str(deep)], False),  # read in the evals package
    ):
        err = _user_error(_run(args))
        assert "nested too deeply" in err and (str(deep) in err or not named), (args, err)


def test_refit_push_labels_are_checked_before_the_refit_and_never_pushed_as_a_failure(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    """A malformed --push-label was found after the whole refit, then used to push the failure
    ("could not push the failure: --push-label 'bad'..."); --push-label without --pushgateway
    was ignored. Both are usage errors now, before the source is read."""
    out = tmp_path / "r.json"
    base = ["refit", "--source", str(files["cells"]), "--out", str(out)]
    bad = _run([*base, "--pushgateway", "127.0.0.1:1", "--push-label", "bad"])
    assert bad.exit_code == ExitCode.USAGE and "expected KEY=VALUE" in bad.output
    assert "could not push" not in bad.output
    alone = _run([*base, "--push-label", "job=x"])
    assert alone.exit_code == ExitCode.USAGE and "--push-label needs --pushgateway" in alone.output
    assert not out.exists()


def test_eval_limit_without_multi_if_is_a_usage_error(tmp_path: Path) -> None:
    """--limit caps Multi-IF conversations; given for scripts it was silently ignored."""
    script = tmp_path / "s.yaml"
    script.write_text("id: s\nruns: 1\nrules: [{name: r, check: no_commas}]\nturns: [{user: hi}]\n")
    res = _run(["eval", "run", str(script), "--model", "atlas", "--router", "sim", "--limit", "3",
                "--db", str(tmp_path / "e.sqlite"), "--no-progress"])  # fmt: skip
    assert res.exit_code == ExitCode.USAGE and "--limit only applies to --multi-if" in res.output
    assert not (tmp_path / "e.sqlite").exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_an_output_directory_that_refuses_files_fails_before_the_work(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    """/proc/self exists and passes os.access as root, but takes no file: 'demo --out-dir' ran
    the whole simulation and failed writing the report; refit failed after the refit."""
    res = _run(["demo", "--size", "0.01", "--no-progress", "--out-dir", "/proc/self"])
    assert "directory '/proc/self' is not writable" in _user_error(res)
    res = _run(["refit", "--source", str(files["cells"]), "--out", "/proc/self/refit.json"])
    assert "directory '/proc/self' is not writable" in _user_error(res)
    assert not list(tmp_path.glob(".handoffmon-*"))
