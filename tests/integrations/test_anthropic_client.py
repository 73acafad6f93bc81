"""wrap(anthropic.Anthropic / AsyncAnthropic): ``messages.create`` (streamed or not) and the
``messages.stream`` helper monitored, read as chat (ADR 0012).

The real SDK talks HTTP to an Anthropic-shaped upstream on loopback
(``tests/proxy/messages_upstream.py``: thinking blocks, tool use, event streams).
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from handoffmon.integrations import wrap
from handoffmon.integrations.anthropic_client import AnthropicClientWrapper
from handoffmon.runtime import build_runtime
from handoffmon.testing import RecordingExporter
from tests.pipeline.helpers import make_config, monitor
from tests.proxy.messages_upstream import TOOL_WORDS, MessagesUpstream, messages_text
from tests.proxy.mock_upstream import schedule

CONFIG = make_config(rules=[{"name": "no_commas", "check": "no_commas"}])
MODES = ["sync", "async", "stream", "astream", "helper", "ahelper"]


async def _ask(client: Any, mode: str, **kwargs: Any) -> Any:
    """One call in ``mode``; returns the final ``Message``."""
    kwargs.setdefault("max_tokens", 100)
    if mode == "sync":
        return client.messages.create(**kwargs)
    if mode == "async":
        return await client.messages.create(**kwargs)
    if mode == "stream":
        events = list(client.messages.create(stream=True, **kwargs))
        return _message(events)
    if mode == "astream":
        events = [e async for e in await client.messages.create(stream=True, **kwargs)]
        return _message(events)
    if mode == "helper":
        with client.messages.stream(**kwargs) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
        assert text == "".join(b.text for b in final.content if b.type == "text")
        return final
    async with client.messages.stream(**kwargs) as astream:
        return await astream.get_final_message()


def _message(events: list[Any]) -> Any:
    """The message a raw event stream carried, accumulated by the SDK's own code."""
    from anthropic.lib.streaming._messages import accumulate_event

    snapshot: Any = None
    bufs: dict[int, bytes] = {}
    for event in events:
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=bufs)
    return snapshot


@pytest.mark.parametrize("mode", MODES)
async def test_conversation_turns_authors_and_tool_use(messages_base: str, mode: str) -> None:
    """Four calls — a tool call, its result, two more questions — give four turns: depth,
    author (the message's ``model``), prefix model, every earlier reply (thinking blocks and
    all, as the SDK returned it) attributed, and the tool-only turn's rule not applicable."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        cls = anthropic.AsyncAnthropic if mode.startswith("a") else anthropic.Anthropic
        wrapped = AnthropicClientWrapper(cls(base_url=messages_base, api_key="k", max_retries=0), m)
        history: list[Any] = [{"role": "user", "content": f"{mode}: please {TOOL_WORDS}"}]
        first = await _ask(wrapped, mode, model="claude-x", system="Be brief.", messages=history)
        (call,) = [b for b in first.content if b.type == "tool_use"]
        history += [
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "42"}]},
        ]
        replies = [first]
        for d in (1, 2, 3):
            reply = await _ask(wrapped, mode, model="claude-x", system="Be brief.", messages=history)
            assert "".join(b.text for b in reply.content if b.type == "text") == messages_text(schedule(d), d)
            replies.append(reply)
            history += [
                {"role": "assistant", "content": reply.content},
                {"role": "user", "content": f"next {d}"},
            ]
        assert m.flush(10)
        assert m.snapshot().monitor_errors == {}  # the SDK's events fold without odd parts
    results = exp.results
    assert [r.context.depth for r in results] == [1, 2, 3, 4]
    authors = [r.record.author for r in results]
    assert authors == [r.model for r in replies] == [schedule(1), schedule(1), schedule(2), schedule(3)]
    assert [r.context.prefix_model for r in results] == ["none", *authors[:-1]]
    assert all(a.method != "unknown" for r in results for a in r.context.attributions)
    assert [len(r.context.attributions) for r in results] == [0, 1, 2, 3]
    assert [c.verdict for c in results[0].checks] == ["not_applicable"]
    assert [c.verdict for r in results[1:] for c in r.checks] == ["fail"] * 3  # the text has commas
    assert all(r.record.streamed is (mode not in ("sync", "async")) for r in results)
    assert results[0].record.finish_reason == "tool_calls" and results[1].record.finish_reason == "stop"
    assert results[1].record.response_id == replies[1].id


def test_wrap_picks_the_anthropic_wrapper_and_passes_the_rest_through(messages_base: str) -> None:
    client = anthropic.Anthropic(base_url=messages_base, api_key="k", max_retries=0)
    rt = build_runtime(CONFIG, registry=None)
    try:
        wrapped = wrap(client, runtime=rt)
        assert isinstance(wrapped, AnthropicClientWrapper) and wrapped.runtime is rt
        assert wrapped.models is client.models
        assert wrapped.messages.count_tokens == client.messages.count_tokens
    finally:
        rt.close()


async def _outcome(call: Any) -> tuple[str, Any]:
    """("ok", what the call gave) or ("raised", the exception type): a call's observable result."""
    try:
        got = call()
        return "ok", (await got if hasattr(got, "__await__") else got)
    except Exception as exc:
        return "raised", type(exc)


@pytest.mark.parametrize("is_async", [False, True])
async def test_a_structured_stream_behaves_as_unwrapped_and_says_it_is_not_monitored(
    messages_base: str, is_async: bool, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``messages.stream(output_format=Answer)``: ``create`` takes no ``output_format`` (the SDK's
    helper turns the type into a schema), so the wrapper leaves the call to the helper: the
    parsed output is the unwrapped client's, no turn is recorded, one warning says so for the
    two calls (the process's record of what it said is reset for the test)."""
    import pydantic

    from handoffmon.integrations import responses_calls

    monkeypatch.setattr(responses_calls, "_told", set())

    class Answer(pydantic.BaseModel):
        answer: str
        depth: int

    async def final(client: Any) -> Any:
        kw = {"model": "claude-x", "max_tokens": 100, "output_format": Answer}
        kw["messages"] = [{"role": "user", "content": "structured stream"}]
        if is_async:
            async with client.messages.stream(**kw) as astream:
                return (await astream.get_final_message()).parsed_output
        with client.messages.stream(**kw) as stream:
            return stream.get_final_message().parsed_output

    cls = anthropic.AsyncAnthropic if is_async else anthropic.Anthropic
    bare = cls(base_url=messages_base, api_key="k", max_retries=0)
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m, caplog.at_level("WARNING", logger="handoffmon.integrations"):
        wrapped = AnthropicClientWrapper(cls(base_url=messages_base, api_key="k", max_retries=0), m)
        got = await final(wrapped)
        assert got == await final(bare) == Answer(answer=messages_text(schedule(1), 1), depth=1)
        await final(wrapped)
        assert m.flush(10)
    assert exp.results == []
    told = [r for r in caplog.records if "output_format" in r.getMessage()]
    assert len(told) == 1


@pytest.mark.parametrize("mode", ["sync", "async", "helper", "ahelper"])
async def test_beta_messages_are_turns(messages_upstream: tuple[MessagesUpstream, str], mode: str) -> None:
    """``client.beta.messages`` (the same Messages API, with ``betas`` sent as the
    ``anthropic-beta`` header): ``create`` and the ``stream`` helper are turns like ``messages``'."""
    app, messages_base = messages_upstream
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        cls = anthropic.AsyncAnthropic if mode.startswith("a") else anthropic.Anthropic
        wrapped = AnthropicClientWrapper(cls(base_url=messages_base, api_key="k", max_retries=0), m)
        history: list[Any] = [{"role": "user", "content": f"beta {mode}"}]
        for d in (1, 2):
            kw = {"model": "claude-x", "max_tokens": 100, "messages": history, "betas": ["some-beta-2026"]}
            if mode == "sync":
                reply = wrapped.beta.messages.create(**kw)
            elif mode == "async":
                reply = await wrapped.beta.messages.create(**kw)
            elif mode == "helper":
                with wrapped.beta.messages.stream(**kw) as stream:
                    reply = stream.get_final_message()
            else:
                async with wrapped.beta.messages.stream(**kw) as astream:
                    reply = await astream.get_final_message()
            text = "".join(b.text for b in reply.content if b.type == "text")
            assert text == messages_text(schedule(d), d)
            history += [{"role": "assistant", "content": text}, {"role": "user", "content": f"next {d}"}]
        assert m.flush(10)
        assert m.snapshot().monitor_errors == {}
    assert [r.context.depth for r in exp.results] == [1, 2]
    assert [r.record.author for r in exp.results] == [schedule(1), schedule(2)]
    assert [a.method for a in exp.results[1].context.attributions] == ["chain"]
    assert "some-beta-2026" in app.headers[-1].get("anthropic-beta", "")
