"""At most one output of a command may be '-' (stdout) (audit 2026-12-07).

``eval switch-matrix --out - --scores -`` printed the matrix JSON and then the scores CSV on one
stream, and ``eval compare --out - --html -`` the JSON and then the page: neither parses. Two
outputs on stdout are a usage error now (exit 2), before any file is read or model called.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from handoffmon.cli import main


@pytest.mark.parametrize(
    "args",
    [
        ["eval", "compare", "--shapes", "{f}", "{f}", "--out", "-", "--html", "-"],
        ["eval", "switch-matrix", "{f}", "--models", "a,b", "--out", "-", "--scores", "-"],
        ["eval", "switch-matrix", "{f}", "--models", "a,b", "--out", "-", "--html", "-"],
        ["eval", "run", "{f}", "--model", "a", "--out", "-", "--html", "-", "--db", "{d}"],
        ["eval", "run", "{f}", "--model", "a", "--jsonl", "-", "--html", "-", "--db", "{d}"],
    ],
    ids=["compare-out-html", "matrix-out-scores", "matrix-out-html", "run-out-html", "run-jsonl-html"],
)
def test_two_outputs_on_stdout_are_a_usage_error(tmp_path: Path, args: list[str]) -> None:
    f = tmp_path / "x.json"
    f.write_text("{}", encoding="utf-8")
    d = tmp_path / "e.sqlite"
    res = CliRunner().invoke(main, [a.format(f=f, d=d) for a in args])
    assert res.exit_code == 2, res.output
    assert "'-'" in res.stderr and "stdout" in res.stderr, res.stderr
    assert res.stdout == "" and not d.exists()


def test_compare_html_on_stdout_keeps_the_text_report_off_it(tmp_path: Path) -> None:
    """``eval compare --html -``: stdout is the page alone; the text report went after it."""
    from tests.evals.test_eval_scope import _eval_doc, _shapes

    shapes = _shapes(tmp_path / "shapes.json", ["atlas"])
    ev = _eval_doc(tmp_path / "eval.json", {"atlas": ["no_commas"]})
    res = CliRunner().invoke(main, ["eval", "compare", "--shapes", shapes, ev, "--html", "-"])
    assert res.exit_code in (0, 3), res.output
    assert res.stdout.startswith("<!doctype html>") and res.stdout.rstrip().endswith("</html>"), res.stdout[
        -300:
    ]
    assert "compared 1 (rule, model, depth)" in res.stderr
