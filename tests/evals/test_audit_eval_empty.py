"""``eval run`` whose checkpoints got no pass or fail verdict is no result: exit 4 (audit 2026-12-07).

A script whose every checkpoint verdict is ``not_applicable`` (``answer_flip`` at turn 1: no
answer before it) or ``error`` exited 0 and wrote an eval JSON whose curves all have n = 0 and
a page of empty charts: a silent all-clear that ``eval compare`` only later found empty.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from handoffmon.cli import main


def _run(tmp_path: Path, rule: dict[str, object]) -> tuple[int, str]:
    script = tmp_path / "s.yaml"
    doc = {"id": "na", "runs": 2, "rules": [rule], "turns": [{"user": "hi", "checkpoint": True}]}
    script.write_text(yaml.safe_dump(doc), encoding="utf-8")
    res = CliRunner().invoke(
        main,
        ["eval", "run", str(script), "--router", "sim", "--model", "general",
         "--db", str(tmp_path / "e.sqlite"), "--out", str(tmp_path / "e.json"),
         "--html", str(tmp_path / "e.html"), "--no-progress"],
    )  # fmt: skip
    return res.exit_code, res.output


def test_checkpoints_with_only_not_applicable_verdicts_exit_4_and_write_nothing(tmp_path: Path) -> None:
    code, output = _run(tmp_path, {"name": "flip", "check": "answer_flip"})
    assert code == 4, output
    assert "no checkpoint" in output and "not_applicable 2" in output, output
    assert not (tmp_path / "e.json").exists() and not (tmp_path / "e.html").exists()
    assert (tmp_path / "e.sqlite").exists()  # the turns stay stored: a script with checkpoints resumes them


def test_checkpoints_with_a_decided_verdict_are_a_result(tmp_path: Path) -> None:
    code, output = _run(tmp_path, {"name": "commas", "check": "no_commas"})
    assert code == 0, output
    assert (tmp_path / "e.json").exists() and (tmp_path / "e.html").exists()
