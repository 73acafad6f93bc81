"""A wrapped ``litellm.Router``'s batch methods: every chat call they make is a monitored turn.

LiteLLM's ``abatch_completion*`` call the router's own ``acompletion``; through the wrapper they
record nothing unless their calls go through the monitored one. The answers must be what the
unwrapped router gives, and a reply a batch returned must be attributable on the next turn.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytest.importorskip("litellm")

from handoffmon.integrations import wrap
from handoffmon.testing import RecordingExporter
from tests.integrations.routers import ALPHA_REPLY, BACKUP_REPLY, CANONICAL, fallback_router
from tests.pipeline.helpers import make_config, runtime

CONFIG = make_config(attribution={"canonical_models": CANONICAL})


def _text(response: Any) -> str:
    return str(response.choices[0].message.content)


async def test_batch_calls_are_turns_with_the_answers_the_router_gives() -> None:
    exp = RecordingExporter()
    raw = fallback_router()
    with runtime(CONFIG, exporters=[exp]) as rt:
        client = wrap(fallback_router(), runtime=rt)
        ask = [{"role": "user", "content": "batch question"}]
        many = await client.abatch_completion(models=["alpha", "primary"], messages=ask)
        direct = await raw.abatch_completion(models=["alpha", "primary"], messages=ask)
        assert [type(r) for r in many] == [type(r) for r in direct]
        assert [_text(r) for r in many] == [_text(r) for r in direct] == [ALPHA_REPLY, BACKUP_REPLY]
        grid = await client.abatch_completion(
            models=["alpha"],
            messages=[[{"role": "user", "content": "g1"}], [{"role": "user", "content": "g2"}]],
        )
        assert [[_text(r) for r in row] for row in grid] == [[ALPHA_REPLY], [ALPHA_REPLY]]
        per_request = await client.abatch_completion_one_model_multiple_requests(
            model="backup",
            messages=[[{"role": "user", "content": "m1"}], [{"role": "user", "content": "m2"}]],
        )
        assert [_text(r) for r in per_request] == [BACKUP_REPLY, BACKUP_REPLY]
        fastest = await client.abatch_completion_fastest_response(model="alpha", messages=ask)
        assert _text(fastest) == ALPHA_REPLY
        assert rt.flush(10)
        # the application continues the conversation with the reply the fallback wrote
        follow = [*ask, {"role": "assistant", "content": _text(many[1])}, {"role": "user", "content": "more"}]
        assert _text(await client.acompletion(model="alpha", messages=follow)) == ALPHA_REPLY
        assert rt.flush(10)
    authors = [(r.record.author, r.context.depth, r.context.prefix_model) for r in exp.results]
    assert sorted(authors[:-1]) == sorted(
        [("model-c", 1, "none")] * 4  # abatch alpha, the grid's two, fastest
        + [("model-b", 1, "none")] * 3  # abatch primary (fell back), the two per-request calls
    )
    assert authors[-1] == ("model-c", 2, "model-b")  # the batch reply was attributed
    assert sorted(r.record.fallbacks for r in exp.results if r.record.author == "model-b") == [0, 0, 1]
    assert rt.monitor.snapshot().monitor_errors == {}


async def test_a_streamed_fastest_response_passes_through_unchanged() -> None:
    """LiteLLM's fastest-response batch keeps only a reply of its own stream type, so a
    streamed one passes through unmonitored and works as it does unwrapped."""
    with runtime(CONFIG) as rt:
        client = wrap(fallback_router(), runtime=rt)
        stream = await client.abatch_completion_fastest_response(
            model="alpha", messages=[{"role": "user", "content": "fast"}], stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream])
        assert text == ALPHA_REPLY
        assert rt.flush(10)
        assert rt.monitor.snapshot().total_turns == 0
