"""wrap(openai.OpenAI / AsyncOpenAI): ``responses.create`` and ``responses.stream`` monitored.

The real SDK talks HTTP to an OpenAI-shaped Responses upstream on loopback
(``tests/proxy/responses_upstream.py``: reasoning items, function calls, event streams).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from handoffmon.integrations import responses_calls
from handoffmon.integrations.openai_client import OpenAIClientWrapper
from handoffmon.testing import RecordingExporter
from tests.conftest import free_port
from tests.pipeline.helpers import make_config, monitor
from tests.proxy.mock_upstream import ServerThread, schedule
from tests.proxy.responses_upstream import TOOL_WORDS, ResponsesUpstream, responses_text

CONFIG = make_config(rules=[{"name": "no_commas", "check": "no_commas"}])
MODES = ["sync", "async", "stream", "astream", "helper", "ahelper"]


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[ResponsesUpstream, str]]:
    app = ResponsesUpstream()
    with ServerThread(app, free_port()) as srv:
        yield app, f"{srv.url}/v1"


async def _ask(client: Any, mode: str, **kwargs: Any) -> Any:
    """One call in ``mode``; returns the final ``Response``."""
    if mode == "sync":
        return client.responses.create(**kwargs)
    if mode == "async":
        return await client.responses.create(**kwargs)
    if mode == "stream":
        final = None
        for event in client.responses.create(stream=True, **kwargs):
            final = event.response if event.type == "response.completed" else final
        return final
    if mode == "astream":
        final = None
        async for event in await client.responses.create(stream=True, **kwargs):
            final = event.response if event.type == "response.completed" else final
        return final
    if mode == "helper":
        with client.responses.stream(**kwargs) as events:
            for _ in events:
                pass
            return events.get_final_response()
    async with client.responses.stream(**kwargs) as aevents:
        async for _ in aevents:
            pass
        return await aevents.get_final_response()


@pytest.mark.parametrize("mode", MODES)
async def test_conversation_turns_authors_and_tool_calls(
    upstream: tuple[ResponsesUpstream, str], mode: str
) -> None:
    """Four calls — a question, a tool call and its output, two more questions — give four
    turns: depth, author (the response's ``model``), prefix model, every earlier output
    attributed, and the tool-only turn's rule not applicable."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        cls = openai.AsyncOpenAI if mode.startswith("a") else openai.OpenAI
        wrapped = OpenAIClientWrapper(cls(base_url=upstream[1], api_key="k", max_retries=0), m)
        items: list[Any] = [{"role": "user", "content": f"{mode}: please {TOOL_WORDS}"}]
        first = await _ask(wrapped, mode, model="gpt-x", instructions="Be brief.", input=items)
        call = next(o for o in first.output if o.type == "function_call")
        items += [*first.output, {"type": "function_call_output", "call_id": call.call_id, "output": "42"}]
        replies = [first]
        for d in (1, 2, 3):
            reply = await _ask(wrapped, mode, model="gpt-x", instructions="Be brief.", input=items)
            assert reply.output_text == responses_text(schedule(d), d)
            replies.append(reply)
            items += [*reply.output, {"role": "user", "content": f"{mode}: next {d}"}]
        assert m.flush(10)
        assert m.snapshot().monitor_errors == {}  # the SDK's events fold without odd parts
    results = exp.results
    assert [r.context.depth for r in results] == [1, 2, 3, 4]
    authors = [r.record.author for r in results]
    assert (
        authors == [reply.model for reply in replies] == [schedule(1), schedule(1), schedule(2), schedule(3)]
    )
    assert [r.context.prefix_model for r in results] == ["none", *authors[:-1]]
    assert all(a.method != "unknown" for r in results for a in r.context.attributions)
    assert [len(r.context.attributions) for r in results] == [0, 1, 2, 3]
    assert [c.verdict for c in results[0].checks] == ["not_applicable"]
    assert [c.verdict for r in results[1:] for c in r.checks] == ["fail"] * 3  # the text has commas
    assert all(r.record.streamed is (mode not in ("sync", "async")) for r in results)
    assert results[0].record.finish_reason == "tool_calls" and results[1].record.finish_reason == "stop"
    assert results[1].record.input_tokens == 12 and results[1].record.response_id == replies[1].id


@pytest.mark.parametrize("mode", MODES)
async def test_chained_calls_are_turns(upstream: tuple[ResponsesUpstream, str], mode: str) -> None:
    """Calls chained by ``previous_response_id`` carry only their new input; each is a turn
    at its true depth, the hidden history attributed from the response it continues
    (``response_id``), through a tool round trip and a handoff (ADR 0011)."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        cls = openai.AsyncOpenAI if mode.startswith("a") else openai.OpenAI
        wrapped = OpenAIClientWrapper(cls(base_url=upstream[1], api_key="k", max_retries=0), m)
        first = await _ask(
            wrapped, mode, model="gpt-x", input=[{"role": "user", "content": f"{mode}: {TOOL_WORDS}"}]
        )
        call = next(o for o in first.output if o.type == "function_call")
        out = [{"type": "function_call_output", "call_id": call.call_id, "output": "42"}]
        replies = [first, await _ask(wrapped, mode, model="gpt-x", input=out, previous_response_id=first.id)]
        for d in (2, 3):
            replies.append(
                await _ask(
                    wrapped,
                    mode,
                    model="gpt-x",
                    input=f"{mode}: next {d}",
                    previous_response_id=replies[-1].id,
                )
            )
        assert replies[-1].output_text == responses_text(schedule(3), 3)
        assert m.flush(10)
        assert m.snapshot().monitor_errors == {}
    results = exp.results
    authors = [r.record.author for r in results]
    assert (
        authors == [reply.model for reply in replies] == [schedule(1), schedule(1), schedule(2), schedule(3)]
    )
    assert [r.context.depth for r in results] == [1, 2, 3, 4]
    assert [r.context.prefix_model for r in results] == ["none", *authors[:-1]]
    assert [r.record.handoff for r in results][-1] is (schedule(3) != schedule(2))
    assert [[a.method for a in r.context.attributions] for r in results] == [
        [],
        ["response_id"],
        ["response_id"] * 2,
        ["response_id"] * 3,
    ]
    assert len({r.context.conversation_id for r in results}) == 1
    assert [c.verdict for c in results[0].checks] == ["not_applicable"]  # the tool call


@pytest.mark.parametrize("mode", MODES)
async def test_chained_calls_count_the_history_they_do_not_send(
    upstream: tuple[ResponsesUpstream, str], mode: str
) -> None:
    """A chained call's ``history_chars`` is the size of the whole history the model continues
    (tool call, tool output, earlier answers): the same as when the application sends the
    whole history itself."""
    sizes: dict[bool, list[tuple[int, int, int]]] = {}
    for chained in (False, True):
        exp = RecordingExporter()
        with monitor(CONFIG, exporters=[exp]) as m:
            cls = openai.AsyncOpenAI if mode.startswith("a") else openai.OpenAI
            wrapped = OpenAIClientWrapper(cls(base_url=upstream[1], api_key="k", max_retries=0), m)
            items: list[Any] = [{"role": "user", "content": f"{mode}: {TOOL_WORDS}"}]
            reply = await _ask(wrapped, mode, model="gpt-x", input=items)
            call = next(o for o in reply.output if o.type == "function_call")
            new: list[Any] = [{"type": "function_call_output", "call_id": call.call_id, "output": "42"}]
            for d in (1, 2, 3):
                items += [o.model_dump(exclude_none=True) for o in reply.output] + new
                if chained:
                    reply = await _ask(wrapped, mode, model="gpt-x", input=new, previous_response_id=reply.id)
                else:
                    reply = await _ask(wrapped, mode, model="gpt-x", input=items)
                new = [{"role": "user", "content": f"{mode}: question {d}"}]
            assert m.flush(10)
        ctxs = [r.context for r in exp.results]
        sizes[chained] = [(c.depth, c.history_chars, c.history_tokens) for c in ctxs]
    assert sizes[True] == sizes[False]
    assert [depth for depth, _, _ in sizes[True]] == [1, 2, 3, 4]
    assert sizes[True][-1][1] > sizes[True][-2][1] > sizes[True][0][1] > 0


@pytest.mark.parametrize("mode", MODES)
async def test_conversation_objects_are_turns(upstream: tuple[ResponsesUpstream, str], mode: str) -> None:
    """Calls continuing one ``conversation`` object carry only their new input: turns at their
    depth under the conversation's id, the hidden history from the conversation's head."""
    exp = RecordingExporter()
    conversation = f"conv_{mode}"
    with monitor(CONFIG, exporters=[exp]) as m:
        cls = openai.AsyncOpenAI if mode.startswith("a") else openai.OpenAI
        wrapped = OpenAIClientWrapper(cls(base_url=upstream[1], api_key="k", max_retries=0), m)
        for depth in (1, 2, 3):
            reply = await _ask(
                wrapped, mode, model="gpt-x", input=f"{mode} {depth}", conversation=conversation
            )
            assert reply.output_text == responses_text(schedule(depth), depth)
        assert m.flush(10)
        assert m.snapshot().monitor_errors == {}
    results = exp.results
    assert [r.context.depth for r in results] == [1, 2, 3]
    assert [r.context.prefix_model for r in results] == ["none", schedule(1), schedule(2)]
    assert {r.context.conversation_id for r in results} == {conversation}
    assert [[a.method for a in r.context.attributions] for r in results] == [
        [],
        ["response_id"],
        ["response_id"] * 2,
    ]


async def test_unknown_stored_histories_pass_through_unmonitored(
    upstream: tuple[ResponsesUpstream, str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A call naming both a previous response and a conversation (the API refuses it; here the
    upstream answers): the SDK's response unchanged, no turn, one warning per process."""
    monkeypatch.setattr(responses_calls, "_told", set())
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m, caplog.at_level(logging.WARNING, "handoffmon.integrations"):
        wrapped = OpenAIClientWrapper(openai.OpenAI(base_url=upstream[1], api_key="k", max_retries=0), m)
        first = wrapped.responses.create(model="gpt-x", input="hello")
        for _ in range(2):
            second = wrapped.responses.create(
                model="gpt-x", input="more", conversation="conv_both", previous_response_id=first.id
            )
        assert isinstance(second, openai.types.responses.Response)
        assert m.flush(10)
    assert len(exp.results) == 1
    told = [r for r in caplog.records if "previous_response_id and conversation" in r.getMessage()]
    assert len(told) == 1 and told[0].levelno == logging.WARNING


def test_the_rest_of_responses_passes_through(upstream: tuple[ResponsesUpstream, str]) -> None:
    client = openai.OpenAI(base_url=upstream[1], api_key="k", max_retries=0)
    with monitor(CONFIG) as m:
        wrapped = OpenAIClientWrapper(client, m)
        assert wrapped.responses.with_raw_response is not None
        assert wrapped.responses.input_items is client.responses.input_items


@pytest.mark.parametrize("stream", [False, True])
async def test_metadata_calls_are_read_on_the_request_path(
    upstream: tuple[ResponsesUpstream, str], stream: bool
) -> None:
    """A call with ``metadata`` (the application's own mapping, which it may change after the
    call) is read when made: its conversation id holds although the mapping changes later."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = OpenAIClientWrapper(openai.OpenAI(base_url=upstream[1], api_key="k", max_retries=0), m)
        meta = {"conversation_id": f"conv-meta-{stream}"}
        items: list[Any] = [{"role": "user", "content": f"with metadata {stream}"}]
        reply = wrapped.responses.create(model="gpt-x", input=items, metadata=meta, stream=stream)
        if stream:
            for _ in reply:
                pass
        meta["conversation_id"] = "changed-after-the-call"
        items.append({"role": "user", "content": "appended after the call"})
        assert m.flush(10)
    (result,) = exp.results
    assert result.context.conversation_id == f"conv-meta-{stream}" and result.context.depth == 1
