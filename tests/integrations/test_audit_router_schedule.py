"""A wrapped ``litellm.Router``'s ``schedule_acompletion`` (LiteLLM's request prioritization) is a
monitored turn.

``Router.schedule_acompletion`` waits for the scheduler and then calls the router's own
``acompletion``; reached through the wrapper's attribute pass-through it was the router's bound
method, so its call reached the router unmonitored and the turn was lost.
"""

from __future__ import annotations

from typing import Any

from handoffmon.integrations import wrap
from handoffmon.testing import RecordingExporter
from tests.integrations.routers import BACKUP_REPLY, CANONICAL, fallback_router  # sets the local cost map
from tests.pipeline.helpers import make_config, runtime

CONFIG = make_config(attribution={"canonical_models": CANONICAL})


def _text(response: Any) -> str:
    return str(response.choices[0].message.content)


async def test_scheduled_completion_is_a_turn_with_the_routers_answer() -> None:
    """The scheduled call falls back as the router's would, is recorded once as the fallback's
    turn, and its reply is attributed on the next turn."""
    exp = RecordingExporter()
    with runtime(CONFIG, exporters=[exp]) as rt:
        client = wrap(fallback_router(), runtime=rt)
        ask = [{"role": "user", "content": "scheduled question"}]
        reply = await client.schedule_acompletion(model="primary", messages=ask, priority=0)
        direct = await fallback_router().schedule_acompletion(model="primary", messages=ask, priority=0)
        assert type(reply) is type(direct)
        assert _text(reply) == _text(direct) == BACKUP_REPLY
        assert rt.flush(10)
        follow = [*ask, {"role": "assistant", "content": _text(reply)}, {"role": "user", "content": "more"}]
        await client.schedule_acompletion(model="alpha", messages=follow, priority=1)
        assert rt.flush(10)
    turns = [(r.record.author, r.context.depth, r.context.prefix_model) for r in exp.results]
    assert turns == [("model-b", 1, "none"), ("model-c", 2, "model-b")]


async def test_scheduled_stream_is_a_turn() -> None:
    """``schedule_acompletion(stream=True)``: the wrapper's stream, recorded when it ends."""
    exp = RecordingExporter()
    with runtime(CONFIG, exporters=[exp]) as rt:
        client = wrap(fallback_router(), runtime=rt)
        ask = [{"role": "user", "content": "scheduled stream"}]
        stream = await client.schedule_acompletion(model="primary", messages=ask, priority=0, stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream])
        assert text == BACKUP_REPLY
        assert rt.flush(10)
    assert [(r.record.author, r.record.streamed) for r in exp.results] == [("model-b", True)]
