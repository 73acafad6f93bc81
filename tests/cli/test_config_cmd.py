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


def test_a_malformed_redis_url_fails_the_check_naming_the_key(tmp_path: Path) -> None:
    """``config check`` said ok to a Redis URL the store could not use (the deploy then failed, or
    with ``/abc`` silently wrote to database 0)."""
    path = tmp_path / "redis.yaml"
    path.write_text("store:\n  backend: redis\n  url: redis://127.0.0.1:6379/abc\n", encoding="utf-8")
    code, out, err = _check(path)
    assert code == 1 and out == ""
    assert str(path) in err and "'store.url'" in err and "database" in err
