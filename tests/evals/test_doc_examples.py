"""The eval harness guide's offline switch-matrix example runs as written."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from handoffmon.cli import main

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "eval-harness.md"


def _documented(marker: str) -> list[str]:
    """The arguments of the guide's ```bash block whose command contains ``marker``."""
    blocks = re.findall(r"```bash\n(.*?)```", GUIDE.read_text(encoding="utf-8"), flags=re.S)
    (block,) = [b for b in blocks if marker in b]
    argv = shlex.split(block.replace("\\\n", " "))
    assert argv[0] == "handoffmon", block
    return argv[1:]


@pytest.mark.slow
def test_the_offline_switch_matrix_example_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The documented command (paths under examples/ taken from the repository, outputs in a temp dir)."""
    argv = _documented("switch-matrix examples/evals/sim_support.yaml --router sim")
    argv = [str(ROOT / a) if a.startswith("examples/") else a for a in argv]
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, [*argv, "--no-progress"])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "matrix.json").read_text())
    runs = argv[argv.index("--runs") + 1]
    assert doc["n_episodes"] == int(runs) and doc["pairs"] and all(p["n"] >= 20 for p in doc["pairs"]), doc
    assert (tmp_path / "matrix.html").read_text().startswith("<!doctype html>")
