"""Call-site fragments of the docs, run with the application's side (a router, the messages) supplied:
the fragment is the page's text, so a renamed key or argument in it fails here."""

from __future__ import annotations

import os
from typing import Any

import pytest

import handoffmon
from handoffmon.config import config_from_mapping
from handoffmon.testing import RecordingExporter
from tests.docs.snippets import claimed

THIS = "tests/docs/test_fragments.py"
RULES_PAGE = "docs/guides/rules.md"
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
