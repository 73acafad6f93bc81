"""LangChain's ``ChatOpenAI`` over wrapped OpenAI clients: every call path it takes is a turn.

``ChatOpenAI`` calls ``client.with_raw_response.create`` (invoke, stream),
``root_client.chat.completions.with_raw_response.parse`` (structured output) and
``root_client.with_raw_response.responses.create`` (the Responses API), so a wrapped client
handed to it recorded one turn in four before ``sdk_views``. The real ``langchain-openai``
talks HTTP, through the real OpenAI SDK, to the loopback upstreams; the guide's snippet
(docs/guides/wrap-router.md) runs as written, on environment variables.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import openai
import pytest
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_openai import ChatOpenAI

from handoffmon.integrations.openai_client import OpenAIClientWrapper
from handoffmon.runtime.build import _shared
from handoffmon.testing import RecordingExporter
from tests.docs.snippets import claimed
from tests.pipeline.helpers import make_config, monitor
from tests.proxy.mock_upstream import CANONICAL_MODELS, Answer, reply_text, schedule

CONFIG = make_config(
    rules=[{"name": "no_commas", "check": "no_commas"}],
    attribution={"canonical_models": CANONICAL_MODELS},
)


def _llm(base: str, m: Any, **kwargs: Any) -> ChatOpenAI:
    client = OpenAIClientWrapper(openai.OpenAI(base_url=base, api_key="k", max_retries=0), m)
    aclient = OpenAIClientWrapper(openai.AsyncOpenAI(base_url=base, api_key="k", max_retries=0), m)
    return ChatOpenAI(
        model="gpt-x",
        api_key="k",  # type: ignore[arg-type]
        base_url=base,
        root_client=client,
        client=client.chat.completions,
        root_async_client=aclient,
        async_client=aclient.chat.completions,
        **kwargs,
    )


def _joined(chunks: list[AIMessageChunk]) -> AIMessage:
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    return AIMessage(content=total.content)


async def test_every_chat_openai_call_is_a_turn(chat_base: str) -> None:
    """invoke, ainvoke, stream, astream and structured output, one conversation: five turns at
    depths 1-5, each by the model that answered, every earlier reply (as LangChain sends it
    back) attributed by its fingerprint."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        llm = _llm(chat_base, m)
        history: list[Any] = [("user", "rivers")]

        async def structured(h: list[Any]) -> AIMessage:
            out = llm.with_structured_output(Answer, method="json_schema", include_raw=True).invoke(h)
            assert isinstance(out, dict) and isinstance(out["parsed"], Answer)
            raw = out["raw"]
            assert isinstance(raw, AIMessage)
            return raw

        async def astream(h: list[Any]) -> AIMessage:
            return _joined([c async for c in llm.astream(h)])

        ways = [
            lambda h: _ready(llm.invoke(h)),
            llm.ainvoke,
            lambda h: _ready(_joined(list(llm.stream(h)))),
            astream,
            structured,
        ]
        for depth, way in enumerate(ways, 1):
            reply = await way(history)
            assert isinstance(reply, AIMessage)
            assert reply_text(schedule(depth), depth) in str(reply.content)
            history += [reply, ("user", f"next {depth}")]
        assert m.flush(10)
        assert m.snapshot().monitor_errors == {}
    results = exp.results
    assert [r.context.depth for r in results] == [1, 2, 3, 4, 5]
    authors = [r.record.author for r in results]
    assert authors == [schedule(d) for d in (1, 2, 3, 4, 5)]
    assert [r.context.prefix_model for r in results] == ["none", *authors[:-1]]
    assert [[a.method for a in r.context.attributions] for r in results] == [["chain"] * d for d in range(5)]
    assert [r.record.streamed for r in results] == [False, False, True, True, False]


async def _ready(value: Any) -> Any:
    return value


@pytest.mark.parametrize("previous_id", [False, True])
def test_chat_openai_on_the_responses_api_is_a_turn(responses_base: str, previous_id: bool) -> None:
    """``use_responses_api``: the history sent in full (attributed by fingerprint) or, with
    ``use_previous_response_id``, continued by id (attributed from the stored chain)."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        llm = _llm(responses_base, m, use_responses_api=True, use_previous_response_id=previous_id)
        history: list[Any] = [("user", f"responses {previous_id}")]
        for depth in (1, 2, 3):
            reply = llm.invoke(history)
            history += [reply, ("user", f"next {depth}")]
        assert m.flush(10)
        assert m.snapshot().monitor_errors == {}
    results = exp.results
    assert [r.context.depth for r in results] == [1, 2, 3]
    assert [r.record.author for r in results] == [schedule(d) for d in (1, 2, 3)]
    method = "response_id" if previous_id else "chain"
    assert [[a.method for a in r.context.attributions] for r in results] == [[], [method], [method] * 2]


def test_the_guide_snippet_runs_as_written(chat_base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/guides/wrap-router.md's LangChain snippet, on the OpenAI SDK's environment
    variables and handoffmon's defaults: its two turns reach the runtime ``wrap`` built, the
    second with the first reply attributed."""
    (block,) = claimed("docs/guides/wrap-router.md", "tests/integrations/test_langchain.py")
    monkeypatch.setenv("OPENAI_BASE_URL", chat_base)
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    monkeypatch.setenv("HANDOFFMON_TELEMETRY__LOG_TURNS", "false")
    before = set(map(id, _shared.values()))
    namespace: dict[str, Any] = {}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(block.code, block.id, "exec"), namespace)
        runtime = namespace["client"].runtime
        assert id(runtime) not in before and namespace["aclient"].runtime is runtime
        assert runtime.flush(10)
        counts = runtime.monitor.snapshot()
        assert sum(counts.turns.values()) == 2
        assert dict(counts.attributions) == {"chain": 1}
        assert counts.monitor_errors == {}
        assert reply_text(schedule(2), 2) in str(namespace["reply"].content)
    finally:
        for runtime in [r for r in _shared.values() if id(r) not in before]:
            runtime.close(0)
