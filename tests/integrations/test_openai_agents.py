"""The OpenAI Agents SDK over a wrapped ``AsyncOpenAI``: agents on different models sharing
one conversation are what handoffmon measures (the next agent continues history another model
wrote), and both of the SDK's model classes make turns.

The real ``openai-agents`` runner, tracing off, over HTTP to the loopback upstreams:
``OpenAIChatCompletionsModel`` (chat completions) and the default ``OpenAIResponsesModel``
(the Responses API, the history sent in full or continued by ``previous_response_id``).
"""

from __future__ import annotations

from typing import Any

import openai
import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, set_default_openai_client, set_tracing_disabled

from handoffmon.integrations.openai_client import OpenAIClientWrapper
from handoffmon.testing import RecordingExporter
from tests.pipeline.helpers import make_config, monitor
from tests.proxy.mock_upstream import CANONICAL_MODELS, reply_text, schedule
from tests.proxy.responses_upstream import responses_text

CONFIG = make_config(
    rules=[{"name": "no_commas", "check": "no_commas"}],
    attribution={"canonical_models": CANONICAL_MODELS},
)


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    set_tracing_disabled(True)  # the SDK would otherwise export traces to OpenAI


async def test_agents_on_two_models_share_a_conversation(chat_base: str) -> None:
    """Agents on model-a and model-b take turns on one history (``to_input_list``): four turns,
    each by its agent's model, the hand-offs between the models seen as such, every earlier
    reply attributed by fingerprint."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        client = OpenAIClientWrapper(openai.AsyncOpenAI(base_url=chat_base, api_key="k", max_retries=0), m)

        def agent(model: str) -> Agent[Any]:
            return Agent(
                name=model,
                instructions="Answer briefly.",
                model=OpenAIChatCompletionsModel(model=model, openai_client=client),
            )

        order = ["model-a", "model-a", "model-b", "model-a"]
        items: Any = "Plan a trip."
        for depth, model in enumerate(order, 1):
            result = await Runner.run(agent(model), items)
            assert result.final_output == reply_text(model, depth)
            items = [*result.to_input_list(), {"role": "user", "content": f"and then {depth}?"}]
        assert m.flush(10)
        assert m.snapshot().monitor_errors == {}
    results = exp.results
    assert [r.context.depth for r in results] == [1, 2, 3, 4]
    assert [r.record.author for r in results] == order
    assert [r.context.prefix_model for r in results] == ["none", *order[:-1]]
    assert [r.record.handoff for r in results] == [False, False, True, True]
    assert [[a.method for a in r.context.attributions] for r in results] == [["chain"] * d for d in range(4)]


async def test_the_default_responses_model_is_monitored(responses_base: str) -> None:
    """``set_default_openai_client(wrapped)`` and an agent naming only its model (the SDK's
    ``OpenAIResponsesModel``): a run on the full history, then one continued by
    ``previous_response_id``; both attributed, the second from the stored chain."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        client = OpenAIClientWrapper(
            openai.AsyncOpenAI(base_url=responses_base, api_key="k", max_retries=0), m
        )
        set_default_openai_client(client, use_for_tracing=False)  # type: ignore[arg-type]
        try:
            agent: Agent[Any] = Agent(name="a", instructions="Answer briefly.", model="model-a")
            first = await Runner.run(agent, "Plan a trip.")
            second = await Runner.run(agent, [*first.to_input_list(), {"role": "user", "content": "more"}])
            third = await Runner.run(agent, "and then?", previous_response_id=second.last_response_id)
        finally:
            set_default_openai_client(openai.AsyncOpenAI(api_key="unused"), use_for_tracing=False)
        assert [first.final_output, second.final_output, third.final_output] == [
            responses_text(schedule(d), d) for d in (1, 2, 3)
        ]  # this upstream answers as its schedule says, whatever the model asked
        assert m.flush(10)
        assert m.snapshot().monitor_errors == {}
    results = exp.results
    assert [r.context.depth for r in results] == [1, 2, 3]
    assert [r.record.author for r in results] == [schedule(d) for d in (1, 2, 3)]
    assert [[a.method for a in r.context.attributions] for r in results] == [
        [],
        ["chain"],
        ["response_id", "response_id"],
    ]
