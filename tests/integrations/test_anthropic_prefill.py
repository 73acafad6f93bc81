"""An Anthropic prefill — a history ending in an assistant message the application wrote, which
the Messages API continues — is no earlier turn, through the real SDK and the wrapped client.

The Messages API defines a trailing assistant message as a prefill, so the reader says so in
chat (``prefix: true``, LiteLLM's spelling): the prefilled turn has the depth and prefix model
of the history before it, and prefill + reply sent back as one message are the replying model's.
Unmarked, the prefill was an ``unknown`` earlier turn: depth one too deep, prefix ``unknown``.
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from handoffmon.ingress.anthropic import read_request
from handoffmon.integrations.anthropic_client import AnthropicClientWrapper
from handoffmon.testing import RecordingExporter
from tests.pipeline.helpers import make_config, monitor
from tests.proxy.messages_upstream import messages_text
from tests.proxy.mock_upstream import schedule

CONFIG = make_config(rules=[{"name": "no_commas", "check": "no_commas"}])


def test_only_a_trailing_assistant_message_is_marked_and_the_body_is_not_changed() -> None:
    body = {
        "model": "claude-x",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "As JSON."},
            {"role": "assistant", "content": [{"type": "text", "text": "{"}]},
        ],
    }
    doc = read_request(body).doc
    assert doc is not None
    assert [m.get("prefix") for m in doc["messages"]] == [None, None, None, True]
    assert doc["messages"][-1]["content"] == "{"
    assert "prefix" not in body["messages"][-1]  # the application's body stays as it was
    ends_with_user = read_request({"messages": body["messages"][:3]}).doc
    assert ends_with_user is not None
    assert all("prefix" not in m for m in ends_with_user["messages"])


@pytest.mark.parametrize("block", [False, True], ids=["string", "blocks"])
async def test_a_prefilled_turn_keeps_the_depth_and_prefix_of_the_history_before_it(
    messages_base: str, block: bool
) -> None:
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        client = anthropic.Anthropic(base_url=messages_base, api_key="k", max_retries=0)
        wrapped = AnthropicClientWrapper(client, m)

        def ask(history: list[Any]) -> str:
            reply = wrapped.messages.create(model="claude-x", max_tokens=100, messages=history)
            return "".join(b.text for b in reply.content if b.type == "text")

        history: list[Any] = [{"role": "user", "content": "What is the refund policy?"}]
        first = ask(history)
        prefill: Any = [{"type": "text", "text": "{"}] if block else "{"
        history += [
            {"role": "assistant", "content": first},
            {"role": "user", "content": "As JSON please."},
            {"role": "assistant", "content": prefill},
        ]
        second = ask(history)
        assert second == messages_text(schedule(2), 2)
        history[-1] = {"role": "assistant", "content": "{" + second}  # sent back as one message
        history.append({"role": "user", "content": "Thanks!"})
        ask(history)
        assert m.flush(10)
        assert m.snapshot().monitor_errors == {}
    first_r, prefilled, nxt = exp.results
    assert (prefilled.context.depth, prefilled.context.prefix_model) == (2, schedule(1))
    assert [(a.author, a.method) for a in prefilled.context.attributions] == [(schedule(1), "chain")]
    assert [(a.author, a.depth, a.method) for a in nxt.context.attributions] == [
        (schedule(1), 1, "chain"),
        (schedule(2), 2, "chain"),
    ]
    assert (nxt.context.depth, nxt.context.prefix_model) == (3, schedule(2))
    assert first_r.context.depth == 1
