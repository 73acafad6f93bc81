"""Exit codes in one place, distinct from click's usage error; defaults that agree; reserved rule names."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from handoffmon.cli import main
from handoffmon.cli.exits import ExitCode, table_markdown
from handoffmon.config import StoreConfig

DOCS = Path(__file__).resolve().parents[2] / "docs" / "guides" / "feedback-loop.md"


def test_exit_codes_are_distinct_and_two_stays_click_usage() -> None:
    """Every code once; 2 is what click itself returns for a usage error, and nothing else uses it."""
    assert len({int(c) for c in ExitCode}) == len(ExitCode)
    res = CliRunner().invoke(main, ["eval", "compare", "--no-such-option"])
    assert res.exit_code == ExitCode.USAGE == 2


def test_the_docs_carry_the_exit_code_table_verbatim() -> None:
    """docs/guides/feedback-loop.md holds table_markdown() as generated, so the two cannot drift."""
    assert table_markdown() in DOCS.read_text(encoding="utf-8")


def test_eval_run_exits_5_when_runs_fail_not_click_usage_2(tmp_path: Path) -> None:
    """A model litellm cannot route fails every run: exit RUN_FAILED with the failures on stderr."""
    script = tmp_path / "s.yaml"
    script.write_text(
        yaml.safe_dump(
            {"id": "s", "runs": 1, "rules": [{"name": "r", "check": "no_commas"}], "turns": [{"user": "hi"}]}
        )
    )
    res = CliRunner().invoke(
        main,
        ["eval", "run", str(script), "--model", "no-provider-model-xyz", "--db", str(tmp_path / "e.sqlite"),
         "--retries", "0", "--no-progress"],
    )  # fmt: skip
    assert res.exit_code == ExitCode.RUN_FAILED == 5, res.output
    assert "1 failed run(s)" in res.stderr and "failed s#0" in res.stderr


def test_shapes_export_default_source_is_the_monitors_default_store(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The default --source is the relative file a sqlite monitor writes (store.path), not at /."""
    from handoffmon.cli.shapes_cmd import DEFAULT_SOURCE, export

    assert DEFAULT_SOURCE == f"sqlite://{StoreConfig().path}" == "sqlite://handoffmon.db"
    assert next(p for p in export.params if p.name == "source").default == DEFAULT_SOURCE
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["shapes", "export", "--out", "s.json"])
    assert res.exit_code == ExitCode.ERROR and "handoffmon.db" in res.stderr  # missing file: named, relative


def test_shapes_export_without_source_or_default_file_says_what_to_do(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The default store backend (memory) writes no file: without --source and without the default
    file, the error names the default, says which backend writes it and points to --source."""
    assert StoreConfig().backend == "memory"
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["shapes", "export", "--out", "s.json"])
    assert res.exit_code == ExitCode.ERROR
    assert "no --source given and the default sqlite://handoffmon.db does not exist" in res.stderr
    assert "store.backend: sqlite" in res.stderr and "pass --source" in res.stderr
    given = ["shapes", "export", "--source", "sqlite://handoffmon.db", "--out", "s.json"]
    res = CliRunner().invoke(main, given)
    assert res.exit_code == ExitCode.ERROR and "no --source given" not in res.stderr  # given: its own error


def test_config_check_rejects_reserved_rule_names(tmp_path: Path) -> None:
    """A rule named 'all' (the refit's pooled fit) or '*' fails config check naming key and file."""
    for name in ("all", "*"):
        cfg = tmp_path / f"c{len(name)}.yaml"
        cfg.write_text(
            yaml.safe_dump(
                {"rules": [{"name": "ok", "check": "no_commas"}, {"name": name, "check": "no_commas"}]}
            )
        )
        res = CliRunner().invoke(main, ["config", "check", str(cfg)])
        assert res.exit_code == ExitCode.ERROR, res.output
        assert str(cfg) in res.stderr and f"rules[{name!r}].name" in res.stderr and "reserved" in res.stderr
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"rules": [{"name": "all_caps", "check": "no_commas"}]}))
    assert CliRunner().invoke(main, ["config", "check", str(good)]).exit_code == ExitCode.OK


def test_a_missing_argument_or_option_is_a_usage_error_whatever_its_type(tmp_path: Path) -> None:
    """`report` without REFIT_JSON, `check` without --rules, `config check` without FILE: click's
    usage error, exit 2 like `refit` without --out; it was 1 when the parameter was a FILE."""
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules: [{name: r, check: no_commas}]\n", encoding="utf-8")
    cases = (
        (["report"], "Missing argument 'REFIT_JSON'"),
        (["config", "check"], "Missing argument 'FILE'"),
        (["check", "--rules", str(rules)], "Missing option '--input'"),
        (["eval", "compare", "--shapes", str(rules)], "Missing argument 'RESULTS...'"),
        (["refit", "--source", str(rules)], "Missing option '--out'"),
    )
    for args, message in cases:
        res = CliRunner().invoke(main, args)
        assert res.exit_code == ExitCode.USAGE, (args, res.output)
        assert message in res.output and "Usage: " in res.output and "error:" not in res.output


STATUSES_BEYOND_ERROR = {
    ("check",): {4},
    ("ifeval",): {4},
    ("refit",): {4},
    ("report",): {4},
    ("shapes", "export"): {4},
    ("stats", "switch-matrix"): {4},
    ("eval", "compare"): {3, 4},
    ("eval", "run"): {4, 5},
    ("eval", "switch-matrix"): {4, 5},
}
"""Each command that can end with an exit status above 1, and those statuses (the code's
``fail(..., ExitCode.X)`` and ``NoDataError`` paths)."""


def test_every_help_names_the_exit_statuses_its_command_can_end_with() -> None:
    """`report --help` said nothing of its exit 4 (a refit with no fit or model), `eval run` and
    `eval switch-matrix` only of 5, though both end with 4 on an empty script directory."""
    import re

    for path, statuses in STATUSES_BEYOND_ERROR.items():
        res = CliRunner().invoke(main, [*path, "--help"], terminal_width=200)
        assert res.exit_code == 0, path
        text = " ".join(res.output.split("Options:")[0].split())
        start = re.search(r"\bexit\b", text, re.IGNORECASE)
        assert start is not None, (path, text)
        said = text[start.start() :]
        assert all(re.search(rf"\b{code}\b", said) for code in statuses), (path, said)
