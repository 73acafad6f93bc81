"""wrap(litellm.Router): ``responses`` / ``aresponses`` monitored, streamed or not, fallbacks included.

A real ``litellm.Router`` calls an OpenAI-shaped Responses upstream on loopback
(``tests/proxy/responses_upstream.py``) over HTTP; ``primary`` answers 429 and falls back to
``backup`` (in the async calls: litellm 1.108's sync ``Router.responses`` raises the 429
instead of falling back, wrapped or not, so the sync modes ask ``backup`` directly).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from handoffmon.integrations.responses_calls import litellm_forwards_conversation
from handoffmon.integrations.router import RouterWrapper
from handoffmon.testing import RecordingExporter
from tests.conftest import free_port
from tests.integrations.routers import CANONICAL, responses_router
from tests.pipeline.helpers import make_config, monitor
from tests.proxy.mock_upstream import ServerThread
from tests.proxy.responses_upstream import ResponsesUpstream

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

CONFIG = make_config(
    rules=[{"name": "no_commas", "check": "no_commas"}],
    attribution={"canonical_models": CANONICAL},
)
MODES = ["sync", "async", "stream", "astream"]


@pytest.fixture(scope="module")
def api_base() -> Iterator[str]:
    with ServerThread(ResponsesUpstream(), free_port()) as srv:
        yield f"{srv.url}/v1"


async def _ask(wrapped: RouterWrapper, mode: str, group: str, items: list[Any]) -> list[Any]:
    """One call in ``mode``; returns the response's output items."""
    if mode == "sync":
        return list(wrapped.responses(model=group, input=items).output)
    if mode == "async":
        return list((await wrapped.aresponses(model=group, input=items)).output)
    if mode == "stream":
        events = list(wrapped.responses(model=group, input=items, stream=True))
    else:
        events = [e async for e in await wrapped.aresponses(model=group, input=items, stream=True)]
    (done,) = [e for e in events if e.type == "response.completed"]
    return list(done.response.output)


@pytest.mark.parametrize("mode", MODES)
async def test_turns_authors_fallbacks_and_attribution(api_base: str, mode: str) -> None:
    """alpha, alpha, primary (429 → backup), alpha: authors from the serving deployment, the
    fallback counted, every earlier output sent back attributed, depth and prefix per turn."""
    falls_back = mode.startswith("a")
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = RouterWrapper(responses_router(api_base), m)
        items: list[Any] = []
        for i, group in enumerate(["alpha", "alpha", "primary" if falls_back else "backup", "alpha"]):
            items.append({"role": "user", "content": f"{mode} question {i}"})
            items += [o.model_dump(exclude_none=True) for o in await _ask(wrapped, mode, group, items)]
        assert m.flush(10)
        assert m.snapshot().monitor_errors == {}  # LiteLLM's events fold without odd parts
    results = exp.results
    assert [r.context.depth for r in results] == [1, 2, 3, 4]
    assert [r.record.author for r in results] == ["model-c", "model-c", "model-b", "model-c"]
    assert [r.context.prefix_model for r in results] == ["none", "model-c", "model-c", "model-b"]
    assert [r.record.fallbacks for r in results] == [0, 0, int(falls_back), 0]
    assert [r.record.deployment_id for r in results] == ["dep-c", "dep-c", "dep-b", "dep-c"]
    assert all(a.method != "unknown" for r in results for a in r.context.attributions)
    assert [len(r.context.attributions) for r in results] == [0, 1, 2, 3]
    assert all(r.record.streamed is mode.endswith("stream") for r in results)
    assert [c.verdict for r in results for c in r.checks] == ["fail"] * 4  # the replies have commas


@pytest.mark.parametrize("mode", MODES)
async def test_chained_calls_are_turns(api_base: str, mode: str) -> None:
    """Calls chained by ``previous_response_id`` (LiteLLM's encoded response ids, sent back as
    the application got them): turns at their true depth, the hidden history attributed from
    the response each continues, and the switch to another group a handoff (ADR 0011)."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = RouterWrapper(responses_router(api_base), m)
        previous = None
        for i, group in enumerate(["alpha", "alpha", "backup", "alpha"]):
            extra: dict[str, Any] = {"previous_response_id": previous} if previous else {}
            previous = await _last_id(wrapped, mode, group, f"{mode} chained {i}", **extra)
        assert m.flush(10)
        assert m.snapshot().monitor_errors == {}
    results = exp.results
    assert [r.context.depth for r in results] == [1, 2, 3, 4]
    assert [r.record.author for r in results] == ["model-c", "model-c", "model-b", "model-c"]
    assert [r.context.prefix_model for r in results] == ["none", "model-c", "model-c", "model-b"]
    assert [r.record.handoff for r in results][2:] == [True, True]
    assert [[a.method for a in r.context.attributions] for r in results] == [
        ["response_id"] * n for n in range(4)
    ]
    assert len({r.context.conversation_id for r in results}) == 1


@pytest.mark.parametrize("mode", MODES)
async def test_conversation_objects_are_turns(api_base: str, mode: str) -> None:
    """Calls continuing one ``conversation`` object through the Router: turns at their depth
    under the conversation's id, the switch of group a handoff, when LiteLLM passes the
    conversation on; when it drops it (1.108), what the model saw: three fresh conversations."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = RouterWrapper(responses_router(api_base), m)
        for i, group in enumerate(["alpha", "backup", "alpha"]):
            await _last_id(wrapped, mode, group, f"{mode} in conversation {i}", conversation=f"conv_r_{mode}")
        assert m.flush(10)
        assert m.snapshot().monitor_errors == {}
    results = exp.results
    assert [r.record.author for r in results] == ["model-c", "model-b", "model-c"]
    if litellm_forwards_conversation():
        assert [r.context.depth for r in results] == [1, 2, 3]
        assert [r.context.prefix_model for r in results] == ["none", "model-c", "model-b"]
        assert {r.context.conversation_id for r in results} == {f"conv_r_{mode}"}
    else:
        assert [r.context.depth for r in results] == [1, 1, 1]
        assert len({r.context.conversation_id for r in results}) == 3


async def _last_id(wrapped: RouterWrapper, mode: str, group: str, text: str, **extra: Any) -> str:
    """One call in ``mode``; the id of its response, as the application gets it."""
    if mode == "sync":
        return str(wrapped.responses(model=group, input=text, **extra).id)
    if mode == "async":
        return str((await wrapped.aresponses(model=group, input=text, **extra)).id)
    if mode == "stream":
        events = list(wrapped.responses(model=group, input=text, stream=True, **extra))
    else:
        events = [e async for e in await wrapped.aresponses(model=group, input=text, stream=True, **extra)]
    (done,) = [e for e in events if e.type == "response.completed"]
    return str(done.response.id)


@pytest.mark.parametrize("stream", [False, True])
async def test_metadata_calls_are_read_when_made(api_base: str, stream: bool) -> None:
    """With ``metadata`` (the application's own mapping) the call is read when made, so a
    later change to the mapping does not move the turn to another conversation; without it,
    the input list is copied and read off the request path, so appending to it after the call
    does not change the turn either."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = RouterWrapper(responses_router(api_base), m)
        meta = {"conversation_id": f"router-meta-{stream}"}
        for kwargs in ({"metadata": meta}, {}):
            items: list[Any] = [{"role": "user", "content": f"read when made {stream} {bool(kwargs)}"}]
            reply = await wrapped.aresponses(model="alpha", input=items, stream=stream, **kwargs)
            if stream:
                async for _ in reply:
                    pass
            meta["conversation_id"] = "changed-after-the-call"
            items.append({"role": "assistant", "content": "appended after the call"})
        assert m.flush(10)
    assert len(exp.results) == 2 and exp.results[0].context.conversation_id == f"router-meta-{stream}"
    assert [r.context.depth for r in exp.results] == [1, 1]  # the appended reply is not in either
