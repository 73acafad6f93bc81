"""The LiteLLM Proxy callback's hooks, called in-process with real Router responses and streams."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from handoffmon.integrations.litellm_callback import HandoffmonCallback, handoffmon_callback
from handoffmon.integrations.responses_calls import litellm_forwards_conversation
from handoffmon.testing import RecordingExporter
from tests.conftest import free_port
from tests.integrations.routers import BACKUP_REPLY, CANONICAL, fallback_router, responses_router
from tests.pipeline.helpers import make_config, runtime
from tests.proxy.mock_upstream import ServerThread
from tests.proxy.responses_upstream import ResponsesUpstream

CONFIG = make_config(attribution={"canonical_models": CANONICAL})


def _request(messages: list[dict[str, Any]], call_id: str, model: str = "primary") -> dict[str, Any]:
    """Request data shaped as the proxy hands it to callbacks."""
    return {
        "model": model,
        "messages": messages,
        "litellm_call_id": call_id,
        "metadata": {"requester_metadata": {"tags": ["checkout"]}},
        "proxy_server_request": {"headers": {"X-Conversation-Id": "conv-7"}},
    }


async def test_hooks_record_fallback_author_latency_and_caller_id() -> None:
    """Non-streamed then streamed turns: author after fallback, caller conversation id, depth, latency."""
    exp = RecordingExporter()
    router = fallback_router()
    with runtime(CONFIG, exporters=[exp]) as rt:
        cb, m = HandoffmonCallback(runtime=rt), rt.monitor
        messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
        data = _request(messages, "call-1")
        await cb.async_pre_call_hook(None, None, data, "acompletion")
        response = await router.acompletion(model="primary", messages=messages)
        assert await cb.async_post_call_success_hook(data, None, response) is None  # response untouched
        messages = [*messages, {"role": "assistant", "content": BACKUP_REPLY}]
        messages.append({"role": "user", "content": "more"})
        data = _request(messages, "call-2", model="alpha")
        await cb.async_pre_call_hook(None, None, data, "acompletion")
        stream = await router.acompletion(model="alpha", messages=messages, stream=True)
        passed = [c async for c in cb.async_post_call_streaming_iterator_hook(None, stream, data)]
        assert "".join(c.choices[0].delta.content or "" for c in passed) == "ok"
        m.flush(10)
    first, second = (r for r in exp.results)
    assert (first.record.author, first.record.fallbacks, first.context.depth) == ("model-b", 1, 1)
    assert (second.record.author, second.record.streamed, second.context.depth) == ("model-c", True, 2)
    assert (second.context.prefix_model, second.record.handoff) == ("model-b", True)
    assert {first.context.conversation_id, second.context.conversation_id} == {"conv-7"}
    assert all(r.record.latency_s is not None and 0 < r.record.latency_s < 30 for r in exp.results)
    assert cb._starts == {}  # every start time was consumed


async def test_non_chat_calls_are_ignored() -> None:
    """Embeddings and other calls without chat messages record nothing and raise nothing."""
    with runtime(CONFIG) as rt:
        cb, m = HandoffmonCallback(runtime=rt), rt.monitor
        await cb.async_post_call_success_hook({"model": "e", "input": ["x"]}, None, object())
        m.flush(10)
        assert m.snapshot().total_turns == 0


async def test_calls_that_never_become_turns_leave_no_start_behind() -> None:
    """The pre-call hook notes a start only for calls that may be turns, and a failed call's
    start is dropped: 400 embeddings and 100 failed chat calls left 500 entries that only the
    100,000 cap ever evicted."""
    with runtime(CONFIG) as rt:
        cb = HandoffmonCallback(runtime=rt)
        for i in range(40):
            data = {"model": "e", "input": ["x"], "litellm_call_id": f"emb-{i}"}
            await cb.async_pre_call_hook(None, None, data, "aembedding")
            await cb.async_post_call_success_hook(data, None, object())
        for i in range(10):
            data = _request([{"role": "user", "content": "hi"}], f"fail-{i}", model="nope")
            await cb.async_pre_call_hook(None, None, data, "acompletion")
            assert f"fail-{i}" in cb._starts
            await cb.async_post_call_failure_hook(data, ValueError("no such model"), None)
        data = _request([{"role": "user", "content": "hi"}], "odd")
        await cb.async_pre_call_hook(None, None, data, "acompletion")
        await cb.async_post_call_success_hook(data, None, object())  # a reply that is no turn
        assert cb._starts == {}


def test_module_instance_builds_its_runtime_lazily() -> None:
    """Importing the module (as the proxy does) builds no runtime until the first hook runs."""
    assert isinstance(handoffmon_callback, HandoffmonCallback)
    assert handoffmon_callback._runtime is None


async def test_streamed_fallback_counts_come_from_the_stream_wrapper() -> None:
    """A streamed reply served by fallback records the fallback deployment and count."""
    exp = RecordingExporter()
    router = fallback_router()
    with runtime(CONFIG, exporters=[exp]) as rt:
        cb, m = HandoffmonCallback(runtime=rt), rt.monitor
        data = _request([{"role": "user", "content": "hi"}], "call-s")
        stream = await router.acompletion(model="primary", messages=data["messages"], stream=True)
        text = "".join(
            [
                c.choices[0].delta.content or ""
                async for c in cb.async_post_call_streaming_iterator_hook(None, stream, data)
            ]
        )
        m.flush(10)
    assert text == BACKUP_REPLY
    rec = exp.results[0].record
    assert (rec.author, rec.deployment_id, rec.fallbacks, rec.streamed) == ("model-b", "dep-b", 1, True)


def test_pre_call_hook_fails_open_when_the_runtime_cannot_be_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """Routing in the pre-call hook builds the runtime; if that raises, the request goes on unchanged."""
    from handoffmon.integrations import litellm_callback as mod

    cb = mod.HandoffmonCallback()

    def broken(config: Any = None) -> Any:
        raise RuntimeError("bad config")

    monkeypatch.setattr("handoffmon.runtime.shared_runtime", broken)
    data: dict[str, Any] = {
        "model": "g",
        "messages": [{"role": "user", "content": "x"}],
        "litellm_call_id": "c1",
    }
    before = dict(data)
    assert asyncio.run(cb.async_pre_call_hook(None, None, data, "completion")) is None
    assert data == before


@pytest.fixture(scope="module")
def responses_api_base() -> Iterator[str]:
    """An OpenAI-shaped Responses upstream on loopback (``tests/proxy/responses_upstream.py``)."""
    with ServerThread(ResponsesUpstream(), free_port()) as srv:
        yield f"{srv.url}/v1"


async def test_responses_api_calls_are_turns(responses_api_base: str) -> None:
    """``/v1/responses`` through the proxy's hooks: a JSON call served by fallback, then a
    streamed one whose input carries the first reply's output items: two turns, authors from
    the deployments, the first reply attributed; a call continuing the first by
    ``previous_response_id`` (its history kept by the provider) is a third turn whose hidden
    history is the first reply, and an embeddings-shaped call records nothing."""
    exp = RecordingExporter()
    router = responses_router(responses_api_base)
    with runtime(CONFIG, exporters=[exp]) as rt:
        cb, m = HandoffmonCallback(runtime=rt), rt.monitor
        items: list[Any] = [{"role": "user", "content": "hi"}]
        data = {"model": "primary", "input": items, "litellm_call_id": "r-1"}
        await cb.async_pre_call_hook(None, None, data, "aresponses")
        first = await router.aresponses(model="primary", input=items)
        assert await cb.async_post_call_success_hook(data, None, first) is None
        items = [
            *items,
            *(o.model_dump(exclude_none=True) for o in first.output),
            {"role": "user", "content": "more"},
        ]
        data = {"model": "alpha", "input": items, "instructions": "Be brief.", "litellm_call_id": "r-2"}
        await cb.async_pre_call_hook(None, None, data, "aresponses")
        stream = await router.aresponses(model="alpha", input=items, instructions="Be brief.", stream=True)
        passed = [e async for e in cb.async_post_call_streaming_iterator_hook(None, stream, data)]
        assert passed[-1].type == "response.completed"
        later = {"model": "alpha", "input": "and?", "previous_response_id": first.id}
        await cb.async_post_call_success_hook(later, None, await router.aresponses(**later))
        await cb.async_post_call_success_hook({"model": "e", "input": ["x"]}, None, object())
        assert m.flush(10)
    first_turn, second_turn, third_turn = exp.results
    assert (first_turn.record.author, first_turn.record.fallbacks, first_turn.context.depth) == (
        "model-b",
        1,
        1,
    )
    assert (second_turn.record.author, second_turn.record.streamed, second_turn.context.depth) == (
        "model-c",
        True,
        2,
    )
    assert (second_turn.context.prefix_model, second_turn.record.handoff) == ("model-b", True)
    assert [a.method != "unknown" for a in second_turn.context.attributions] == [True]
    assert (third_turn.context.depth, third_turn.context.prefix_model) == (2, "model-b")
    assert [a.method for a in third_turn.context.attributions] == ["response_id"]
    assert third_turn.context.conversation_id == first_turn.context.conversation_id
    assert cb._starts == {}


class _ImportsSeen:
    """A ``sys.meta_path`` finder that records (and refuses) imports of the named modules."""

    def __init__(self, *names: str) -> None:
        self.names, self.seen = set(names), list[str]()

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name in self.names:
            self.seen.append(name)
            raise ImportError(f"{name} refused by the test")


async def test_a_responses_stream_outside_a_proxy_does_not_load_the_proxy_server(
    responses_api_base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A streamed Responses API turn seen by hooks called in-process (no proxy server loaded):
    its id is recorded as sent, without importing ``litellm.proxy.proxy_server`` on the
    attribution thread. LiteLLM's id decryption imports it for the key; that took 5-9 s on an
    idle core and over 20 s under CPU load, so ``flush(10)`` of the Responses test timed out."""
    seen = _ImportsSeen("litellm.proxy.proxy_server")
    monkeypatch.delitem(sys.modules, "litellm.proxy.proxy_server", raising=False)
    monkeypatch.setattr(sys, "meta_path", [seen, *sys.meta_path])
    exp = RecordingExporter()
    router = responses_router(responses_api_base)
    with runtime(CONFIG, exporters=[exp]) as rt:
        cb, m = HandoffmonCallback(runtime=rt), rt.monitor
        data = {"model": "alpha", "input": "hi", "litellm_call_id": "r-s"}
        await cb.async_pre_call_hook(None, None, data, "aresponses")
        stream = await router.aresponses(model="alpha", input="hi", stream=True)
        passed = [e async for e in cb.async_post_call_streaming_iterator_hook(None, stream, data)]
        assert m.flush(10)
    assert seen.seen == []
    (turn,) = exp.results
    assert (turn.record.author, turn.record.streamed) == ("model-c", True)
    assert turn.record.response_id == passed[-1].response.id


async def test_responses_api_conversation_objects_are_turns(responses_api_base: str) -> None:
    """Calls continuing a ``conversation`` object through the proxy's hooks: turns at their
    depth under the conversation's id, the hidden history from the conversation's head, when
    LiteLLM passes the conversation on; when it drops it (1.108), three fresh conversations."""
    exp = RecordingExporter()
    router = responses_router(responses_api_base)
    with runtime(CONFIG, exporters=[exp]) as rt:
        cb, m = HandoffmonCallback(runtime=rt), rt.monitor
        for i, group in enumerate(["alpha", "backup", "alpha"]):
            data = {"model": group, "input": f"conversation turn {i}", "conversation": {"id": "conv_cb"}}
            await cb.async_pre_call_hook(None, None, data, "aresponses")
            assert await cb.async_post_call_success_hook(data, None, await router.aresponses(**data)) is None
        assert m.flush(10)
    results = exp.results
    if litellm_forwards_conversation():
        assert [(r.context.depth, r.record.author, r.context.prefix_model) for r in results] == [
            (1, "model-c", "none"),
            (2, "model-b", "model-c"),
            (3, "model-c", "model-b"),
        ]
        assert {r.context.conversation_id for r in results} == {"conv_cb"}
    else:
        assert [(r.context.depth, r.record.author) for r in results] == [
            (1, "model-c"),
            (1, "model-b"),
            (1, "model-c"),
        ]
        assert len({r.context.conversation_id for r in results}) == 3


async def test_a_stream_of_unreadable_events_passes_through_untouched() -> None:
    """A request without messages whose events cannot even say their type: every event
    reaches the client unchanged, nothing raises, no turn is recorded (fail open)."""

    class Odd:
        @property
        def type(self) -> str:
            raise RuntimeError("no type")

    with runtime(CONFIG) as rt:
        cb, m = HandoffmonCallback(runtime=rt), rt.monitor
        sent = [Odd() for _ in range(3)]
        data = {"model": "x", "input": "hi"}
        passed = [e async for e in cb.async_post_call_streaming_iterator_hook(None, _replay(sent), data)]
        assert passed == sent
        assert m.flush(10)
        assert m.snapshot().total_turns == 0


async def _replay(items: list[Any]) -> Any:
    for item in items:
        yield item


async def test_a_config_that_cannot_load_is_said_once_per_retry_and_traffic_goes_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A bad ``HANDOFFMON_CONFIG`` in a proxy: every call passes through unchanged, the config is
    not re-read on every request, and the operator gets one ERROR line naming the file and key
    per retry interval (not two tracebacks per request); fixed on disk, the next retry builds the
    runtime and monitoring starts."""
    from handoffmon.config import load_config
    from handoffmon.integrations import litellm_callback as mod
    from handoffmon.runtime import build_runtime

    path = tmp_path / "handoffmon.yaml"
    path.write_text("rules:\n  - name: r\n    check: lenght\n")
    monkeypatch.setenv("HANDOFFMON_CONFIG", str(path))
    attempts: list[float] = []
    exp = RecordingExporter()

    def shared(config: Any = None) -> Any:  # shared_runtime, on a private registry
        attempts.append(now[0])
        return build_runtime(load_config(), registry=None, exporters=[exp])

    monkeypatch.setattr("handoffmon.runtime.shared_runtime", shared)
    now = [1000.0]
    cb = mod.HandoffmonCallback(clock=lambda: now[0])
    router = fallback_router()

    async def call(i: int) -> Any:
        data = _request([{"role": "user", "content": f"hi {i}"}], f"cfg-{i}", model="alpha")
        await cb.async_pre_call_hook(None, None, data, "acompletion")
        response = await router.acompletion(model="alpha", messages=data["messages"])
        assert await cb.async_post_call_success_hook(data, None, response) is None
        return response

    caplog.set_level("WARNING", logger="handoffmon")
    for i in range(20):
        assert (await call(i)).choices[0].message.content == "ok"
    said = [r for r in caplog.records if r.name.startswith("handoffmon")]
    assert [r.levelname for r in said] == ["ERROR"]
    assert str(path) in said[0].getMessage() and "lenght" in said[0].getMessage()
    assert attempts == [1000.0]  # tried once, not on every request

    path.write_text("rules:\n  - name: r\n    check: length\n    params: {unit: words, max: 5}\n")
    now[0] += mod.RUNTIME_RETRY_S - 1
    await call(20)
    assert len(attempts) == 1  # not yet: within the retry interval
    now[0] += 2
    await call(21)
    assert len(attempts) == 2
    rt = cb.runtime
    try:
        assert rt.flush(10)
        assert [r.context.requested_model for r in exp.results] == ["alpha"]
    finally:
        rt.close()


class _Unreadable:
    """A response whose every attribute read raises (not ``AttributeError``)."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"cannot read {name}")


async def test_hook_failures_pass_the_call_through_and_are_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail-open, and counted: a response the success hook cannot even classify, and a capture
    that raises, leave the call untouched (the hooks return ``None``, nothing raises into the
    proxy) and each adds one ``monitor_errors{stage="integration"}``. Before, the first raised
    into the proxy's request and the second was only logged (a traceback per request)."""
    with runtime(CONFIG) as rt:
        cb, m = HandoffmonCallback(runtime=rt), rt.monitor
        data = _request([{"role": "user", "content": "hi"}], "odd-1")
        await cb.async_pre_call_hook(None, None, data, "acompletion")
        assert await cb.async_post_call_success_hook(data, None, _Unreadable()) is None

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("capture failed")

        monkeypatch.setattr(m, "capture", broken)
        data = _request([{"role": "user", "content": "hi"}], "odd-2")
        response = await fallback_router().acompletion(model="alpha", messages=data["messages"])
        assert await cb.async_post_call_success_hook(data, None, response) is None
        stream = await fallback_router().acompletion(model="alpha", messages=data["messages"], stream=True)
        passed = [c async for c in cb.async_post_call_streaming_iterator_hook(None, stream, data)]
        assert "".join(c.choices[0].delta.content or "" for c in passed) == "ok"
        assert m.flush(10)
        snap = m.snapshot()
        assert snap.monitor_errors.get("integration") == 3
        assert snap.total_turns == 0
        assert cb._starts == {}


class _SlowFirstEvent:
    """An Anthropic Messages upstream that sends its event-stream headers at once and no event
    until ``release`` is set (a reply slow to start: a long think, a loaded provider); then it
    ends the body, so the server can stop at once."""

    def __init__(self) -> None:
        self.release = threading.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        while not self.release.wait(0):
            await asyncio.sleep(0.02)
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def test_a_stream_the_client_leaves_before_its_first_event_is_no_turn() -> None:
    """A ``/v1/messages`` stream (a real Router's ``aanthropic_messages``) whose client hangs up
    before the first event arrived (Claude Code's Esc, a browser's stop): the proxy cancels the
    hook's iteration, no reply was seen, so no turn, as in the wrappers and ``serve``. It was
    recorded as an empty reply of the deployment (``handoffmon_turns_total`` counted it)."""
    exp = RecordingExporter()
    upstream = _SlowFirstEvent()
    with ServerThread(upstream, free_port()) as srv, runtime(CONFIG, exporters=[exp]) as rt:
        from litellm import Router

        params = {"model": "anthropic/claude-x", "api_key": "k", "api_base": srv.url}
        router = Router(model_list=[{"model_name": "claude", "litellm_params": params}], num_retries=0)
        cb, m = HandoffmonCallback(runtime=rt), rt.monitor
        messages = [{"role": "user", "content": "hi"}]
        data = {
            "model": "claude",
            "messages": messages,
            "max_tokens": 50,
            "litellm_call_id": "call-gone",
            "proxy_server_request": {"url": "http://proxy/v1/messages"},
        }
        await cb.async_pre_call_hook(None, None, data, "anthropic_messages")
        stream = await router.aanthropic_messages(
            model="claude", messages=messages, max_tokens=50, stream=True
        )

        async def relay() -> None:  # the proxy's response body, cancelled when the client is gone
            async for _ in cb.async_post_call_streaming_iterator_hook(None, stream, data):
                pass

        task = asyncio.create_task(relay())
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        upstream.release.set()
        assert m.flush(10)
        assert exp.results == [] and m.snapshot().total_turns == 0
        assert cb._starts == {}


async def test_a_messages_stream_the_upstream_fails_before_its_first_event_is_counted_no_reply() -> None:
    """A ``/v1/messages`` stream that raises the upstream's error (an ``APIStatusError``, as the
    Anthropic SDK or LiteLLM raise for an ``error`` event) before any event: no turn, counted
    ``error``, as the wrappers count it (``EventFolder.raised``); a stream that raised a dropped
    connection before any event is nothing at all. The hook returned before counting when no
    chunk had come."""
    import anthropic
    import httpx

    req = httpx.Request("POST", "http://x/v1/messages")
    failures = {
        "upstream": anthropic.APIStatusError(
            "overloaded", response=httpx.Response(529, request=req), body={"type": "error"}
        ),
        "dropped": anthropic.APIConnectionError(request=req),
    }
    for name, exc in failures.items():
        exp = RecordingExporter()
        with runtime(CONFIG, exporters=[exp]) as rt:
            cb = HandoffmonCallback(runtime=rt)
            messages = [{"role": "user", "content": "hi"}]
            data = {
                "model": "claude",
                "messages": messages,
                "max_tokens": 50,
                "litellm_call_id": f"call-{name}",
                "proxy_server_request": {"url": "http://proxy/v1/messages"},
            }
            await cb.async_pre_call_hook(None, None, data, "anthropic_messages")

            async def failing(exc: BaseException = exc) -> Any:
                raise exc
                yield b""  # an async generator

            with pytest.raises(type(exc)):
                async for _ in cb.async_post_call_streaming_iterator_hook(None, failing(), data):
                    pass
            assert rt.monitor.flush(10)
        assert exp.results == [], name
        assert exp.no_replies == ({"error": 1} if name == "upstream" else {}), name


async def test_a_folder_that_cannot_give_its_outcome_never_breaks_the_proxys_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fail-open at the end of a stream: should a folder's ``outcome`` raise (a shape nobody
    anticipated, as a Messages block whose ``type`` was an object did), the hook's ``finally``
    raised it into LiteLLM's response. Now every event is passed on, the stream ends
    normally, and the failure is counted (``monitor_errors{stage="integration"}``), no turn."""
    from handoffmon.ingress.anthropic import MessagesStreamFolder

    def broken(self: Any, *, completed: bool) -> Any:
        raise TypeError("unhashable type: 'dict'")

    monkeypatch.setattr(MessagesStreamFolder, "outcome", broken)
    events = [b'event: message_start\ndata: {"type": "message_start", "message": {"content": []}}\n\n']

    async def stream() -> Any:
        for e in events:
            yield e

    exp = RecordingExporter()
    with runtime(CONFIG, exporters=[exp]) as rt:
        cb = HandoffmonCallback(runtime=rt)
        data = {
            "model": "claude",
            "messages": [{"role": "user", "content": "hi"}],
            "litellm_call_id": "call-broken-outcome",
            "proxy_server_request": {"url": "http://proxy/v1/messages"},
        }
        await cb.async_pre_call_hook(None, None, data, "anthropic_messages")
        passed = [e async for e in cb.async_post_call_streaming_iterator_hook(None, stream(), data)]
        assert passed == events
        assert rt.monitor.flush(10)
        assert rt.monitor.snapshot().monitor_errors == {"integration": 1}
    assert exp.results == []
