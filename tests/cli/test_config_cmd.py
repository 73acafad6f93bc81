"""`handoffmon config check`: errors name key and file; valid configs that check nothing say so."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from handoffmon.cli import main


def _check(path: Path) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, ["config", "check", str(path)], env={"HANDOFFMON_CONFIG": ""})
    return res.exit_code, res.stdout, res.stderr


def test_an_empty_file_and_a_config_without_rules_are_valid_but_said(tmp_path: Path) -> None:
    """An empty file (a template rendered empty) was reported 'ok' and nothing else, and so was
    a config under which no turn is ever checked; both now warn on stderr, exit 0."""
    empty = tmp_path / "handoffmon.yaml"
    empty.write_text("", encoding="utf-8")
    code, out, err = _check(empty)
    assert code == 0 and out.startswith(f"ok: {empty}")
    assert f"warning: {empty} sets nothing (empty or null)" in err
    assert "warning: no rules: turns and handoffs are counted" in err
    closed = tmp_path / "closed.yaml"
    closed.write_text("request_rules:\n  enabled: false\n", encoding="utf-8")
    code, _, err = _check(closed)
    assert code == 0 and "sets nothing" not in err and "no turn is ever checked" in err


def test_a_config_with_rules_checks_without_warnings(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("rules:\n  - {name: r, check: no_commas}\n", encoding="utf-8")
    code, out, err = _check(path)
    assert (code, err) == (0, "") and "1 rule(s)" in out
