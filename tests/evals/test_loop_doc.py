"""The feedback-loop guide's offline loop runs as written, from an empty directory (audit 2026-12-07).

docs/guides/feedback-loop.md's block marked with this file: demo (simulated production) →
shapes export → eval run → eval switch-matrix → eval compare → report, each command exactly as
the page gives it, run in a scratch directory holding a copy of examples/. Every step must succeed,
the comparison must hold compared cells joined on the author, with the matrix's pair covered, and
the three pages must run their scripts in headless Chromium with nothing on the console.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from handoffmon.cli import main
from tests.conftest import require_binary
from tests.docs.snippets import ROOT, claimed, shell_commands
from tests.evals.layout import chromium, console_errors

PAGE = "docs/guides/feedback-loop.md"


@pytest.mark.slow
def test_the_offline_loop_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (block,) = claimed(PAGE, "tests/evals/test_loop_doc.py", lang="bash")
    lines = shell_commands(block.code)
    assert [shlex.split(ln)[1] for ln in lines] == ["demo", "shapes", "eval", "eval", "eval", "report"], lines
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    for line in lines:
        argv = shlex.split(line)[1:]
        res = CliRunner().invoke(main, argv)
        allowed = (0, 3) if argv[:2] == ["eval", "compare"] else (0,)  # 3: a rule flagged too clean
        assert res.exit_code in allowed, (line, res.output[-3000:])
    doc = json.loads((tmp_path / "compare.json").read_text(encoding="utf-8"))
    assert doc["schema"] == "handoffmon.eval_compare" and doc["joined_on"] == "author", doc.keys()
    assert doc["model"] == "atlas" and doc["rules"] and {r["model"] for r in doc["rules"]} == {"atlas"}
    pairs = {(p["prefix_model"], p["model"]) for p in doc["missing_pairs"]}
    assert pairs and ("atlas", "ember") not in pairs and ("ember", "atlas") not in pairs, pairs
    assert (tmp_path / "eval.html").read_text(encoding="utf-8").startswith("<!doctype html>")
    matrix = json.loads((tmp_path / "matrix.json").read_text(encoding="utf-8"))
    assert matrix["authors"] == {"experimental": "ember", "general": "atlas"}, matrix["authors"]
    binary = require_binary("chromium")
    for page in ("eval.html", "matrix.html", "report.html"):  # scripts ran, and nothing on the console
        run = chromium(binary, tmp_path / f"profile-{page}", "--dump-dom", (tmp_path / page).as_uri())
        assert 'id="report-ready"' in run.stdout and console_errors(run) == [], (page, run.stderr[-2000:])
