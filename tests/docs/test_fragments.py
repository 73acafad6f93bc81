"""Call-site fragments of the docs, run with the application's side (a router, the messages) supplied:
the fragment is the page's text, so a renamed key or argument in it fails here."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import handoffmon
from handoffmon import Monitor
from handoffmon.cli import main
from handoffmon.config import config_from_mapping
from handoffmon.exporters import build_exporters
from handoffmon.ingress import Outcome, RequestParser
from handoffmon.testing import RecordingExporter
from tests.docs.snippets import claimed

THIS = "tests/docs/test_fragments.py"
RULES_PAGE = "docs/guides/rules.md"
TURN_LOGS_PAGE = "docs/guides/turn-logs.md"
REPLY = "Yes, one, two."


@pytest.fixture
def mock_router() -> Any:
    litellm = pytest.importorskip("litellm")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network for the cost map
    return litellm.Router(
        model_list=[
            {
                "model_name": "gpt",
                "litellm_params": {
                    "model": "openai/gpt-4o",
                    "api_key": "k",
                    "mock_response": "Yes, one, two.",
                },
            }
        ]
    )


def test_rules_declared_by_a_request_are_checked_from_then_on(mock_router: Any) -> None:
    """guides/rules.md's call declares two rules in the first request's metadata: the IFEval word
    count is checked at turn 1 and again at turn 2 without being resent; `no_commas`
    (`min_depth: 2`) only from turn 2, where the reply's commas fail it."""
    (block,) = claimed(RULES_PAGE, THIS)
    recorder = RecordingExporter()
    config = config_from_mapping({"refit": {"interval_s": 0}, "telemetry": {"log_turns": False}})
    runtime = handoffmon.build_runtime(config, registry=None, exporters=[recorder])
    try:
        router = handoffmon.wrap(mock_router, runtime=runtime)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Count to two."}]
        namespace: dict[str, Any] = {"router": router, "messages": messages}
        exec(compile(block.code, block.id, "exec"), namespace)
        messages += [
            {"role": "assistant", "content": "Yes, one, two."},
            {"role": "user", "content": "Again."},
        ]
        router.completion(model="gpt", messages=messages)  # turn 2 declares nothing
        assert runtime.flush()
    finally:
        runtime.close()
    verdicts = {r.context.depth: {c.rule: c.verdict for c in r.checks} for r in recorder.results}
    assert verdicts == {
        1: {"length_constraints:number_words": "pass"},
        2: {"length_constraints:number_words": "pass", "no_commas": "fail"},
    }


def test_turn_log_written_as_the_page_says_is_a_refit_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """guides/turn-logs.md's logging lines, then a monitor with the default `telemetry.log_turns`:
    the file holds one JSON line per turn and `handoffmon refit --source turns.jsonl` reads it."""
    pytest.importorskip("duckdb")
    (block,) = claimed(TURN_LOGS_PAGE, THIS)
    monkeypatch.chdir(tmp_path)
    turn_log = logging.getLogger("handoffmon.turns")
    saved = (turn_log.handlers[:], turn_log.level, turn_log.propagate)
    namespace: dict[str, Any] = {}
    try:
        exec(compile(block.code, block.id, "exec"), namespace)
        config = config_from_mapping(
            {"rules": [{"name": "short", "check": "length", "params": {"unit": "words", "max": 4}}]}
        )
        with Monitor(config, exporters=build_exporters(config, registry=None)) as monitor:
            for conversation in range(3):
                history = [{"role": "user", "content": "Hi"}]
                for author, reply in (("a", "Hello there."), ("b", "A much longer answer than that.")):
                    turn = monitor.capture(
                        RequestParser().parse(history, "g", headers={"x-conversation-id": f"c{conversation}"})
                    )
                    answer = {"role": "assistant", "content": reply}
                    monitor.finish(turn, answer, Outcome(authors=(author,)))
                    history = [*history, answer, {"role": "user", "content": "More?"}]
            assert monitor.flush(10.0)
    finally:
        if "handler" in namespace:
            namespace["handler"].close()
        turn_log.handlers[:], turn_log.level, turn_log.propagate = saved
    lines = [json.loads(line) for line in (tmp_path / "turns.jsonl").read_text().splitlines()]
    assert [(x["depth"], x["model"], x["verdicts"]) for x in lines if x["conversation_id"] == "c0"] == [
        (1, "a", {"short": "pass"}),
        (2, "b", {"short": "fail"}),
    ]
    out = CliRunner().invoke(main, ["refit", "--source", "turns.jsonl", "--out", "refit.json"])
    assert out.exit_code == 0, out.output
    assert json.loads((tmp_path / "refit.json").read_text())["rules"]["short"]
