"""A deployment without its provider's key is a configuration error: the eval stops at the first call.

``eval run --router router.yaml`` with a deployment whose provider key was not set retried every
call 3 times (litellm raises AuthenticationError for Anthropic, InternalServerError "Missing
credentials" for OpenAI, both before any request is sent) and ended with exit 5, "rerun to
resume", which no rerun repairs. Real ``litellm.Router`` deployments without an api_key, no
network: litellm refuses before it connects.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from handoffmon.cli import main
from handoffmon.evals.models import (
    MissingCredentialsError,
    RouterResponder,
    credentials_error,
    router_from_config,
)
from handoffmon.evals.runner import Runner, RunSettings, RunSummary, call_with_retries
from handoffmon.evals.script import script_from_dict
from handoffmon.evals.store import ResultStore
from tests.evals.test_eval_scope import SCRIPT

KEYS = ("OPENAI_API_KEY", "OPENAI_ADMIN_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)


def _router(tmp_path: Path) -> str:
    path = tmp_path / "router.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "model_list": [
                    {
                        "model_name": "claude",
                        "litellm_params": {"model": "anthropic/claude-3-5-haiku-latest"},
                    },
                    {"model_name": "gpt", "litellm_params": {"model": "openai/gpt-4o-mini"}},
                    {
                        "model_name": "mock",
                        "litellm_params": {"model": "openai/gpt-4o", "mock_response": "hi"},
                    },
                ]
            }
        ),
        encoding="utf-8",
    )
    return str(path)


def _script(tmp_path: Path) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCRIPT), encoding="utf-8")  # 3 runs of 2 turns
    return str(path)


def _errors(stderr: str) -> list[str]:
    """The command's error lines; LiteLLM may log warnings of its own around them (its logging
    worker moving to a new event loop, callbacks earlier tests' Routers left)."""
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


@pytest.mark.parametrize(("group", "key"), [("claude", "ANTHROPIC_API_KEY"), ("gpt", "OPENAI_API_KEY")])
def test_eval_run_stops_at_the_first_call_without_credentials(tmp_path: Path, group: str, key: str) -> None:
    db = tmp_path / "e.sqlite"
    res = CliRunner().invoke(
        main,
        ["eval", "run", _script(tmp_path), "--router", _router(tmp_path), "--model", group,
         "--db", str(db), "--no-progress"],
    )  # fmt: skip
    assert res.exit_code == 1, res.output
    (first,) = _errors(res.stderr)
    assert first.startswith(f"error: model '{group}' (deployment "), first
    assert f"no credentials: set {key} in the environment" in first, first
    assert "not retried" in first and "failed run(s)" not in res.stderr, res.stderr
    with ResultStore(db) as store:
        assert list(store.rows(model=group)) == []


def test_the_runner_makes_one_call_and_cancels_the_runs_waiting(tmp_path: Path) -> None:
    """Concurrency 1: the first run's first call raises, the two runs queued behind it never call."""
    router = router_from_config(_router(tmp_path))
    script = script_from_dict(SCRIPT)
    settings = RunSettings(concurrency=1, retries=3, backoff_s=0.2)
    with ResultStore(tmp_path / "e.sqlite") as store:
        runner = Runner(RouterResponder(router), store, settings)
        with pytest.raises(MissingCredentialsError) as raised:
            asyncio.run(runner.run([script], "claude"))
    assert runner.summary.model_calls == 1 and runner.summary.retries == 0
    assert runner.summary.failed == []  # not a resumable failure
    assert type(raised.value.__cause__).__name__ == "AuthenticationError"


def test_switch_matrix_without_credentials_is_exit_1_not_a_resumable_failure(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    res = CliRunner().invoke(
        main,
        ["eval", "switch-matrix", _script(tmp_path), "--router", _router(tmp_path), "--models", "mock,claude",
         "--cache", str(cache), "--out", str(tmp_path / "m.json"), "--min-n", "2", "--no-progress"],
    )  # fmt: skip
    assert res.exit_code == 1, res.output
    (error,) = _errors(res.stderr)
    assert error.startswith("error: model 'claude' (deployment anthropic/"), res.stderr
    assert "ANTHROPIC_API_KEY" in res.stderr and "switch matrix stopped" not in res.stderr


def test_other_provider_errors_are_still_retried() -> None:
    """A failure that a retry can repair (here any RuntimeError) is retried as before; a message
    saying the credentials are missing is not, whatever the exception type."""

    class Flaky:
        calls = 0

        async def __call__(self, model: str, messages: object, *, seed: int) -> object:
            self.calls += 1
            raise RuntimeError("Connection reset by peer")

    flaky, summary = Flaky(), RunSummary()
    settings = RunSettings(retries=2, backoff_s=0.0)
    with pytest.raises(RuntimeError):
        asyncio.run(call_with_retries(flaky, "m", [], 1, settings, summary))  # type: ignore[arg-type]
    assert flaky.calls == 3 and summary.retries == 2
    assert credentials_error(RuntimeError("Connection reset by peer"), "m") is None
    refused = credentials_error(ValueError("Missing credentials. Please pass an `api_key`"), "m")
    assert refused is not None and "provider unknown said: Missing credentials" in str(refused)
