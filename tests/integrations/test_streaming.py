"""Stream wrappers over the chunk folder: text, tool calls, per-chunk deployments, cut-off reporting."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai

from handoffmon.ingress import ChunkFolder, StreamOutcome
from handoffmon.ingress.anthropic import MessagesStreamFolder
from handoffmon.ingress.responses import ResponsesStreamFolder
from handoffmon.integrations.streaming import AsyncStream, SyncStream


class Chunk:
    """A LiteLLM-shaped stream chunk carrying the serving deployment in ``_hidden_params``."""

    def __init__(self, delta: dict[str, Any], model_id: str | None = None, finish: str | None = None) -> None:
        self.model = "m"
        self.choices = [{"delta": delta, "finish_reason": finish}]
        self._hidden_params = {"model_id": model_id} if model_id else {}


def test_text_and_tool_calls_accumulate_as_a_resendable_message() -> None:
    """Content pieces join; tool-call fragments merge by index into OpenAI's message shape."""
    acc = ChunkFolder()
    acc.feed(Chunk({"role": "assistant", "content": "Hel"}))
    acc.feed(Chunk({"content": "lo"}))
    acc.feed(
        Chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": '{"a"'}}]})
    )
    acc.feed(Chunk({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}, finish="tool_calls"))
    out = acc.outcome(completed=True)
    assert out.reply == {
        "role": "assistant",
        "content": "Hello",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}],
    }
    assert (out.finish_reason, out.chunks, out.completed) == ("tool_calls", 4, True)


def test_mid_stream_fallback_continuation_gives_two_authors() -> None:
    """Chunks produced by two deployments (a continuation after a mid-stream failure) → both, in order."""
    acc = ChunkFolder()
    acc.feed(Chunk({"content": "first half "}, "dep-a"))
    acc.feed(Chunk({"content": "more "}, "dep-a"))
    acc.feed(Chunk({"content": ""}, "dep-x"))  # produced nothing: not an author
    acc.feed(Chunk({"content": "second half"}, "dep-b"))
    assert acc.outcome(completed=True).deployment_ids == ("dep-a", "dep-b")


def test_sync_stream_yields_unchanged_and_reports_once() -> None:
    """The wrapper yields the very chunk objects and calls back exactly once at the end."""
    chunks = [Chunk({"content": "a"}, "d"), Chunk({"content": "b"}, "d")]
    seen: list[StreamOutcome] = []
    stream = SyncStream(iter(chunks), lambda out, inner: seen.append(out))
    got = list(stream)
    stream.close()
    assert all(a is b for a, b in zip(got, chunks, strict=True))
    assert [(o.reply["content"], o.completed) for o in seen] == [("ab", True)]


def test_plain_iterables_are_accepted() -> None:
    """A stream that is only iterable (a list) is iterated too."""
    seen: list[StreamOutcome] = []
    out = list(SyncStream([Chunk({"content": "a"}), Chunk({"content": "b"})], lambda o, i: seen.append(o)))
    assert len(out) == 2 and seen[0].reply["content"] == "ab"


def test_sync_stream_error_and_early_close_report_cut_off() -> None:
    """A stream that raises mid-way, or is closed early, reports what arrived with completed=False."""

    def broken() -> Any:
        yield Chunk({"content": "part"})
        raise ConnectionError("upstream died")

    seen: list[StreamOutcome] = []
    stream = SyncStream(broken(), lambda out, inner: seen.append(out))
    try:
        for _ in stream:
            pass
    except ConnectionError:
        pass
    early = SyncStream(iter([Chunk({"content": "x"}), Chunk({"content": "y"})]), lambda o, i: seen.append(o))
    next(early)
    early.close()
    assert [(o.reply["content"], o.completed) for o in seen] == [("part", False), ("x", False)]


async def test_async_stream_reports_once() -> None:
    """The async wrapper reports once when the stream ends, and aclose after the end is harmless."""

    async def gen() -> Any:
        for c in ("a", "b", "c"):
            yield Chunk({"content": c}, "d")

    seen: list[StreamOutcome] = []
    stream = AsyncStream(gen(), lambda out, inner: seen.append(out))
    text = "".join([c.choices[0]["delta"]["content"] async for c in stream])
    await stream.aclose()
    assert text == "abc"
    assert [(o.reply["content"], o.deployment_ids) for o in seen] == [("abc", ("d",))]


_DEPLOYMENTS = {"dep-a": "openai/model-a", "dep-b": "openai/model-b"}


class _TwoDeploymentRouter:
    """A router whose stream continues on a second deployment (what a mid-stream fallback yields)."""

    def completion(self, model: str, messages: list[Any], **kwargs: Any) -> Any:
        return iter(
            [Chunk({"content": "first half "}, "dep-a"), Chunk({"content": "second"}, "dep-b", "stop")]
        )

    def get_deployment(self, model_id: str) -> Any:
        class _Params:
            model = _DEPLOYMENTS[model_id]

        class _Deployment:
            litellm_params = _Params()

        return _Deployment()


def test_router_wrapper_records_both_authors_of_a_continued_stream() -> None:
    """Through RouterWrapper: both deployments' models are the turn's authors, the later one its author."""
    from handoffmon.integrations.router import RouterWrapper
    from handoffmon.testing import RecordingExporter
    from tests.pipeline.helpers import monitor

    exp = RecordingExporter()
    with monitor(exporters=[exp]) as m:
        wrapped = RouterWrapper(_TwoDeploymentRouter(), m)
        chunks = list(
            wrapped.completion(model="g", messages=[{"role": "user", "content": "hi"}], stream=True)
        )
        assert len(chunks) == 2
        assert m.flush(10)
    (result,) = exp.results
    assert result.record.authors == ("openai/model-a", "openai/model-b")
    assert (result.record.author, result.record.deployment_id, result.record.streamed) == (
        "openai/model-b",
        "dep-b",
        True,
    )


def _raising(events: list[Any], exc: BaseException) -> Any:
    yield from events
    raise exc


def _ended_by(exc: BaseException, folder: Any, events: list[Any]) -> StreamOutcome:
    """The outcome a stream of ``events`` that then raised ``exc`` reports."""
    seen: list[StreamOutcome] = []
    s = SyncStream(_raising(events, exc), lambda out, _inner: seen.append(out), folder)
    try:
        list(s)
    except BaseException as raised:
        assert raised is exc
    (out,) = seen
    return out


def _openai_status_error(status: int) -> Any:
    req = httpx.Request("POST", "http://x/v1/responses")
    return openai.InternalServerError(
        "boom", response=httpx.Response(status, request=req), body={"code": "x"}
    )


def test_an_event_stream_the_upstream_ends_with_an_error_before_any_text_is_no_reply() -> None:
    """The SDK's (or LiteLLM's) exception for an error the upstream sent: status code or body.
    After text, or a dropped connection or timeout (no status code, no body; LiteLLM gives
    its ``APIConnectionError`` one): cut off, as before. A chat stream alike (it was cut off
    even before any text: an empty turn the rules judged)."""
    req = httpx.Request("POST", "http://x/v1/messages")
    start = {"type": "message_start", "message": {"id": "m", "model": "c", "content": []}}
    text = [
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
    ]
    upstream = [
        _openai_status_error(500),
        openai.APIError("stream error", req, body={"message": "m"}),  # the openai SDK's error event
        anthropic.APIStatusError(
            "overloaded", response=httpx.Response(200, request=req), body={"type": "error"}
        ),
    ]
    for exc in upstream:
        assert _ended_by(exc, MessagesStreamFolder(), [start]).no_reply == "error", exc
        assert _ended_by(exc, ResponsesStreamFolder(), [{"type": "response.created"}]).no_reply == "error"
        said = _ended_by(exc, MessagesStreamFolder(), [start, *text])
        assert (said.no_reply, said.completed, said.reply["content"]) == (None, False, "Hi")
        assert _ended_by(exc, ChunkFolder(), [Chunk({"role": "assistant"})]).no_reply == "error"
        chat = _ended_by(exc, ChunkFolder(), [Chunk({"role": "assistant", "content": "Hi"})])
        assert (chat.no_reply, chat.completed, chat.reply["content"]) == (None, False, "Hi")
    connection = [
        openai.APIConnectionError(request=req),
        openai.APITimeoutError(request=req),
        anthropic.APIConnectionError(request=req),
        httpx.RemoteProtocolError("peer closed"),
        RuntimeError("the application's own"),
    ]
    litellm_connection = type("APIConnectionError", (Exception,), {"status_code": 500, "body": {}})
    for exc in [*connection, litellm_connection("x")]:
        out = _ended_by(exc, MessagesStreamFolder(), [start])
        assert (out.no_reply, out.completed) == (None, False), exc
        assert _ended_by(exc, ChunkFolder(), [Chunk({"role": "assistant"})]).no_reply is None, exc
