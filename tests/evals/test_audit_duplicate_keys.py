"""Drift scripts and router configs refuse a key given twice, as config files do (audit 2026-12-07).

PyYAML keeps the last of two equal keys: a script with two ``turns:`` lists ran the second only
(exit 0, the first list's checkpoints gone), and a router config with two ``model_list:`` lost
the first's groups, so every call failed after its retries (exit 5, "no healthy deployments").
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from handoffmon.cli import main
from handoffmon.errors import ConfigError
from handoffmon.evals.models import router_from_config

SCRIPT = """id: d
runs: 1
rules:
  - {name: a, check: no_commas}
turns:
  - user: "one"
    checkpoint: true
turns:
  - user: "two"
"""


def test_a_script_with_a_key_given_twice_is_refused_naming_file_key_and_lines(tmp_path: Path) -> None:
    script = tmp_path / "dup.yaml"
    script.write_text(SCRIPT, encoding="utf-8")
    db = tmp_path / "e.sqlite"
    res = CliRunner().invoke(
        main,
        [
            "eval",
            "run",
            str(script),
            "--router",
            "sim",
            "--model",
            "general",
            "--db",
            str(db),
            "--no-progress",
        ],
    )
    assert res.exit_code == 1, res.output
    assert f"{script}" in res.output and "'turns' given twice" in res.output and "lines 5 and 8" in res.output
    assert not db.exists()


def test_a_router_config_with_model_list_twice_is_refused_before_any_call(tmp_path: Path) -> None:
    router = tmp_path / "router.yaml"
    router.write_text(
        "model_list:\n  - model_name: chat\n    litellm_params: {model: openai/x}\n"
        "model_list:\n  - model_name: other\n    litellm_params: {model: openai/y}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"'model_list' given twice .*lines 1 and 4") as err:
        router_from_config(router)
    assert str(router) in str(err.value)
