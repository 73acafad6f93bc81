"""A Responses API answer that finished without a reply is no turn in the in-process adapters.

``failed`` (whatever output it kept), ``cancelled``, or ``incomplete`` with no output text and
no tool call (its tokens spent on reasoning): recorded, it would be an empty reply failing every
rule, charged to the model for the upstream's failure. Each is counted by status instead
(``Monitor.no_reply``: ``RecordingExporter.no_replies`` here,
``handoffmon_responses_without_reply_total`` in Prometheus). ``incomplete`` with its text
(``max_output_tokens``) stays a turn, checked as any reply.

The real ``openai`` SDK (sync and async; ``create``, ``create(stream=True)``, the
``responses.stream`` helper, ``background=True`` with ``retrieve``), a real ``litellm.Router``
and the LiteLLM Proxy callback's hook talk HTTP to the
OpenAI-shaped upstream of ``tests/proxy/responses_upstream.py`` (``x-mock-final-status``,
``x-mock-final-output``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from handoffmon.integrations.litellm_callback import HandoffmonCallback
from handoffmon.integrations.openai_client import OpenAIClientWrapper
from handoffmon.integrations.router import RouterWrapper
from handoffmon.testing import RecordingExporter
from tests.conftest import free_port
from tests.integrations.test_responses_retrieve import _maybe
from tests.pipeline.helpers import make_config, monitor, runtime
from tests.proxy.mock_upstream import ServerThread
from tests.proxy.responses_upstream import ResponsesUpstream

CONFIG_RULES = [{"name": "says_enough", "check": "length", "params": {"unit": "words", "min": 3}}]
CONFIG = make_config(rules=CONFIG_RULES)
MODES = ["sync", "async", "stream", "astream", "helper", "ahelper", "background", "abackground"]
TERMINAL = ("response.completed", "response.failed", "response.incomplete")


@pytest.fixture(scope="module")
def api_base() -> Iterator[str]:
    with ServerThread(ResponsesUpstream(), free_port()) as srv:
        yield f"{srv.url}/v1"


async def _final(events: Any) -> Any:
    """The response of a stream's terminal event (sync or async iterator)."""
    final = None
    if hasattr(events, "__aiter__"):
        async for event in events:
            final = event.response if event.type in TERMINAL else final
    else:
        for event in events:
            final = event.response if event.type in TERMINAL else final
    return final


async def _ask(wrapped: OpenAIClientWrapper, mode: str, **kwargs: Any) -> Any:
    """One call in ``mode``; the finished ``Response`` the application saw."""
    responses = wrapped.responses
    if mode in ("sync", "async"):
        return await _maybe(responses.create(**kwargs))
    if mode in ("stream", "astream"):
        return await _final(await _maybe(responses.create(stream=True, **kwargs)))
    if mode == "helper":
        with responses.stream(**kwargs) as events:
            return await _final(events)
    if mode == "ahelper":
        async with responses.stream(**kwargs) as aevents:
            return await _final(aevents)
    # background: queued, then one poll in progress (the call stays parked), then finished
    queued = await _maybe(responses.create(background=True, **kwargs))
    assert queued.status == "queued"
    polled = await _maybe(responses.retrieve(queued.id))
    assert polled.status == "in_progress" and responses._turns.background.waiting(queued.id)
    final = await _maybe(responses.retrieve(queued.id))
    assert not responses._turns.background.waiting(queued.id)
    again = await _maybe(responses.retrieve(queued.id))  # polled again: counted once
    assert again.status == final.status
    return final


async def _run(
    api_base: str, mode: str, headers: dict[str, str], **extra: Any
) -> tuple[Any, RecordingExporter]:
    """One call in ``mode`` through a wrapped client of a fresh monitor, drained: the response
    the application saw, and what the monitor exported. The mock's ``headers`` are the client's
    default headers: ``extra_headers`` would make the wrapper read the request on the request
    path, never later."""
    exp = RecordingExporter()
    raw = openai.AsyncOpenAI if mode.startswith("a") else openai.OpenAI
    defaults = {**headers, "x-mock-polls": "1"}  # a background call: one poll in progress
    with monitor(CONFIG, exporters=[exp]) as m:
        client = raw(api_key="k", base_url=api_base, max_retries=0, default_headers=defaults)
        final = await _ask(OpenAIClientWrapper(client, m), mode, model="gpt-x", input="hi there", **extra)
        assert m.flush(10)
    return final, exp


@pytest.mark.parametrize("metadata", [None, {"tags": "t"}], ids=["read_later", "read_now"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("status", "output"),
    [("failed", "kept"), ("failed", "none"), ("incomplete", "none")],
    ids=["failed_with_text", "failed_empty", "incomplete_empty"],
)
async def test_an_answer_finished_without_a_reply_is_no_turn_and_counted(
    api_base: str, mode: str, status: str, output: str, metadata: Any
) -> None:
    """Changed (was an empty-reply turn failing ``says_enough``): no turn, no check, counted
    once by status; the application gets the SDK's response unchanged."""
    extra = {} if metadata is None else {"metadata": metadata}
    headers = {"x-mock-final-status": status, "x-mock-final-output": output}
    final, exp = await _run(api_base, mode, headers, **extra)
    assert final.status == status and (final.output_text == "") == (output == "none")
    assert exp.results == []
    assert exp.no_replies == Counter({status: 1})


@pytest.mark.parametrize("mode", MODES)
async def test_an_incomplete_answer_with_text_is_a_turn(api_base: str, mode: str) -> None:
    """``incomplete`` at ``max_output_tokens`` with its text: a real, truncated reply, one turn
    checked as any (finish reason ``length``), nothing counted without a reply."""
    final, exp = await _run(api_base, mode, {"x-mock-final-status": "incomplete"})
    assert final.status == "incomplete" and final.output_text
    got = [(r.record.reply_chars, r.record.finish_reason) for r in exp.results]
    assert got == [(len(final.output_text), "length")]
    assert exp.verdicts() == Counter({("says_enough", "pass"): 1})
    assert exp.no_replies == Counter()


@pytest.mark.parametrize("mode", ["background", "abackground"])
async def test_a_background_call_cancelled_upstream_is_no_turn(api_base: str, mode: str) -> None:
    """A background call the upstream reports ``cancelled`` (not cancelled through the wrapper,
    which forgets the call): the retrieve that finds it takes it out, counted ``cancelled``."""
    final, exp = await _run(api_base, mode, {"x-mock-final-status": "cancelled"})
    assert final.status == "cancelled"
    assert exp.results == [] and exp.no_replies == Counter({"cancelled": 1})


def _router(api_base: str, *headers: dict[str, str]) -> Any:
    """A Router whose model group ``g<i>`` sends the mock's ``headers[i]`` (in its deployment's
    parameters: ``extra_headers`` in a call would make the wrapper read it on the request path)."""
    from litellm import Router

    params = {"model": "openai/gpt-x", "api_key": "k", "api_base": api_base}
    groups = [
        {"model_name": f"g{i}", "litellm_params": {**params, "extra_headers": h}}
        for i, h in enumerate(headers)
    ]
    return Router(model_list=groups, num_retries=0)


async def _events_of(stream: Any) -> Any:
    """The terminal event's type of a LiteLLM Responses stream."""
    last = None
    async for event in stream:
        last = str(getattr(event.type, "value", event.type))
    return last


@pytest.mark.parametrize("mode", ["sync", "async", "metadata", "stream"])
async def test_a_wrapped_router_records_no_turn_for_an_answer_without_a_reply(
    api_base: str, mode: str
) -> None:
    """``Router.responses`` / ``aresponses`` (read later, read now with metadata, streamed): an
    answer ``failed`` with its text (a stream: ``incomplete`` with none, since LiteLLM raises on
    ``response.failed``) is no turn, counted; ``incomplete`` with its text is one turn."""
    nothing = {"x-mock-final-status": "incomplete", "x-mock-final-output": "none"}
    cases = [
        ({"x-mock-final-status": "failed"} if mode != "stream" else nothing),
        {"x-mock-final-status": "incomplete"},
    ]
    exp = RecordingExporter()
    extra: dict[str, Any] = {"metadata": {"tags": ["t"]}} if mode == "metadata" else {}
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = RouterWrapper(_router(api_base, *cases), m)
        for i, headers in enumerate(cases):
            kw: dict[str, Any] = {"model": f"g{i}", "input": "hi there", **extra}
            if mode == "sync":
                assert wrapped.responses(**kw).status == headers["x-mock-final-status"]
            elif mode == "stream":
                assert await _events_of(await wrapped.aresponses(stream=True, **kw)) == "response.incomplete"
            else:
                assert (await wrapped.aresponses(**kw)).status == headers["x-mock-final-status"]
        assert m.flush(10)
    assert exp.verdicts() == Counter({("says_enough", "pass"): 1})
    assert exp.no_replies == Counter({"incomplete" if mode == "stream" else "failed": 1})


async def test_the_proxy_callback_records_no_turn_for_an_answer_without_a_reply(api_base: str) -> None:
    """The hooks of a LiteLLM Proxy's ``/v1/responses`` call: ``failed`` (success hook) and a
    stream ending ``response.incomplete`` with no text (streaming hook) are no turn, counted;
    ``incomplete`` with its text is one turn."""
    statuses = ("failed", "incomplete")
    nothing = {"x-mock-final-status": "incomplete", "x-mock-final-output": "none"}
    router = _router(api_base, *({"x-mock-final-status": s} for s in statuses), nothing)
    exp = RecordingExporter()
    with runtime(CONFIG, exporters=[exp]) as rt:
        cb = HandoffmonCallback(runtime=rt)
        for i, status in enumerate(statuses):
            data = {"model": f"g{i}", "input": "hi there", "litellm_call_id": f"nr-{i}"}
            await cb.async_pre_call_hook(None, None, data, "aresponses")
            response = await router.aresponses(model=f"g{i}", input="hi there")
            assert response.status == status
            assert await cb.async_post_call_success_hook(data, None, response) is None
        data = {"model": "g2", "input": "hi there", "litellm_call_id": "nr-2"}
        await cb.async_pre_call_hook(None, None, data, "aresponses")
        stream = await router.aresponses(model="g2", input="hi there", stream=True)
        passed = [e async for e in cb.async_post_call_streaming_iterator_hook(None, stream, data)]
        assert str(getattr(passed[-1].type, "value", passed[-1].type)) == "response.incomplete"
        assert rt.monitor.flush(10)
    assert exp.verdicts() == Counter({("says_enough", "pass"): 1})
    assert exp.no_replies == Counter({"failed": 1, "incomplete": 1})


async def test_a_router_stream_litellm_breaks_off_at_response_failed_is_a_cut_off_turn(api_base: str) -> None:
    """Not a no-reply when text came first: LiteLLM raises to the application at
    ``response.failed`` instead of passing the event on, so the wrapper sees a stream the
    upstream broke off after some text, recorded as any
    (a turn whose rules are ``not_applicable``, reason ``incomplete``: no adherence drop).
    Pins what docs/guides/wrap-router.md says, should LiteLLM start passing the event on."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = RouterWrapper(_router(api_base, {"x-mock-final-status": "failed"}), m)
        with pytest.raises(Exception, match="failed to generate"):
            await _events_of(await wrapped.aresponses(model="g0", input="hi there", stream=True))
        assert m.flush(10)
    assert [(c.rule, c.verdict, c.reason) for r in exp.results for c in r.checks] == [
        ("says_enough", "not_applicable", "incomplete")
    ]
    assert exp.no_replies == Counter()


async def test_a_router_stream_litellm_breaks_off_at_response_failed_before_any_text_is_no_turn(
    api_base: str,
) -> None:
    """The same break-off with no text before it (the output only a reasoning item): the wrapper
    sees LiteLLM's ``InternalServerError`` (the upstream's error, not a dropped connection)
    end an event stream that said nothing, so no turn, counted ``error`` (a ``failed`` the
    wrapper cannot name as such)."""
    exp = RecordingExporter()
    nothing = {"x-mock-final-status": "failed", "x-mock-final-output": "none"}
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = RouterWrapper(_router(api_base, nothing), m)
        with pytest.raises(Exception, match="failed to generate"):
            await _events_of(await wrapped.aresponses(model="g0", input="hi there", stream=True))
        assert m.flush(10)
    assert exp.results == []
    assert exp.no_replies == Counter({"error": 1})


# -- a stream cut before its terminal event -------------------------------------------------
# The HTTP body ends cleanly after ``x-mock-cut-after`` events, without ``response.completed``
# (``.incomplete``, ``.failed``): the SDK's iterator just stops. No complete reply: a cut-off
# turn (rules ``not_applicable``, reason ``incomplete``), not an empty or short reply every
# rule judges (it was a ``completed`` turn before). Cut after 4 events: created, in progress,
# the reasoning item added and done, no text; after 12: some text.

CUTS = [("4", False), ("12", True)]
CUT_OFF = [("says_enough", "not_applicable", "incomplete")]


def _cut_off(exp: RecordingExporter, text: bool) -> None:
    """``exp`` got one cut-off turn (with some text or none), nothing counted without a reply."""
    assert [(c.rule, c.verdict, c.reason) for r in exp.results for c in r.checks] == CUT_OFF
    assert [r.record.reply_chars > 0 for r in exp.results] == [text]
    assert exp.no_replies == Counter()


@pytest.mark.parametrize("mode", ["stream", "astream", "helper", "ahelper"])
@pytest.mark.parametrize(("cut", "text"), CUTS, ids=["no_text", "some_text"])
async def test_a_stream_cut_before_its_terminal_event_is_a_cut_off_turn(
    api_base: str, mode: str, cut: str, text: bool
) -> None:
    final, exp = await _run(api_base, mode, {"x-mock-cut-after": cut})
    assert final is None  # the application saw no terminal event either
    _cut_off(exp, text)


# LiteLLM (1.108) raises ``APIConnectionError`` to the application when the body ends
# without a terminal event: a dropped connection to the wrapper, not the upstream's error, so
# a cut-off turn with text or without (an older LiteLLM that just stopped would reach the
# folder's rule, as the SDK above does).
ENDED_EARLY = "closed the responses stream before any terminal event"


@pytest.mark.parametrize(("cut", "text"), CUTS, ids=["no_text", "some_text"])
async def test_a_router_stream_cut_before_its_terminal_event_is_a_cut_off_turn(
    api_base: str, cut: str, text: bool
) -> None:
    import litellm

    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = RouterWrapper(_router(api_base, {"x-mock-cut-after": cut}), m)
        with pytest.raises(litellm.APIConnectionError, match=ENDED_EARLY):
            await _events_of(await wrapped.aresponses(model="g0", input="hi there", stream=True))
        assert m.flush(10)
    _cut_off(exp, text)


@pytest.mark.parametrize(("cut", "text"), CUTS, ids=["no_text", "some_text"])
async def test_the_proxy_callback_records_a_stream_cut_before_its_terminal_event_as_cut_off(
    api_base: str, cut: str, text: bool
) -> None:
    import litellm

    router = _router(api_base, {"x-mock-cut-after": cut})
    exp = RecordingExporter()
    with runtime(CONFIG, exporters=[exp]) as rt:
        cb = HandoffmonCallback(runtime=rt)
        data = {"model": "g0", "input": "hi there", "litellm_call_id": f"cut-{cut}"}
        await cb.async_pre_call_hook(None, None, data, "aresponses")
        stream = await router.aresponses(model="g0", input="hi there", stream=True)
        passed: list[Any] = []
        with pytest.raises(litellm.APIConnectionError, match=ENDED_EARLY):
            async for event in cb.async_post_call_streaming_iterator_hook(None, stream, data):
                passed.append(event)
        assert passed and all(str(getattr(e.type, "value", e.type)) not in TERMINAL for e in passed)
        assert rt.monitor.flush(10)
    _cut_off(exp, text)


@pytest.mark.parametrize("adapter", ["router", "callback"])
async def test_litellm_breaking_off_at_response_failed_before_any_text_is_one_verdict_in_every_adapter(
    api_base: str, adapter: str
) -> None:
    """The same LiteLLM stream (the upstream's ``response.failed`` with no text before it, which
    LiteLLM raises as its ``InternalServerError``) read by the wrapped Router and by the LiteLLM
    Proxy callback's streaming hook: one verdict from the one folder (``EventFolder.raised``),
    no turn, counted ``error``. The hook used to record it as a cut-off turn with no text."""
    nothing = {"x-mock-final-status": "failed", "x-mock-final-output": "none"}
    router = _router(api_base, nothing)
    exp = RecordingExporter()
    with runtime(CONFIG, exporters=[exp]) as rt:
        if adapter == "router":
            wrapped = RouterWrapper(router, rt.monitor)
            with pytest.raises(Exception, match="failed to generate"):
                await _events_of(await wrapped.aresponses(model="g0", input="hi there", stream=True))
        else:
            cb = HandoffmonCallback(runtime=rt)
            data = {"model": "g0", "input": "hi there", "litellm_call_id": "failed-no-text"}
            await cb.async_pre_call_hook(None, None, data, "aresponses")
            stream = await router.aresponses(model="g0", input="hi there", stream=True)
            with pytest.raises(Exception, match="failed to generate"):
                async for _ in cb.async_post_call_streaming_iterator_hook(None, stream, data):
                    pass
        assert rt.monitor.flush(10)
    assert exp.results == []
    assert exp.no_replies == Counter({"error": 1})


ERRORS = [
    {"type": "error", "code": "server_error", "message": "The server had an error", "sequence_number": 1},
    {"error": {"type": "server_error", "message": "upstream overloaded"}},
]
ERROR_IDS = ["error_event", "error_body"]
CREATED = {
    "type": "response.created",
    "sequence_number": 0,
    "response": {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "gpt-x",
        "status": "in_progress",
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    },
}


def _error_stream(error: dict[str, Any]) -> bytes:
    """A Responses stream the upstream fails before any text: created, then ``error``."""
    return b"".join(
        f"event: {e.get('type', 'error')}\ndata: {json.dumps(e)}\n\n".encode() for e in (CREATED, error)
    )


async def _sse_upstream(body: bytes, send: Any) -> None:
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
    )
    await send({"type": "http.response.body", "body": body})


@pytest.mark.parametrize("error", ERRORS, ids=ERROR_IDS)
async def test_the_openai_wrapper_reads_an_error_before_any_text_as_no_reply(error: dict[str, Any]) -> None:
    """The real OpenAI SDK reading a Responses stream whose upstream sends an error before any
    text: it yields the ``error`` event (it was folded as nothing: a recorded cut-off turn with
    an empty reply) or raises ``APIError`` for an ``{"error": ...}`` payload. Either way no
    turn, counted ``error``, as ``serve`` reads the same bytes (next test)."""
    import httpx

    def upstream(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, content=_error_stream(error), headers={"content-type": "text/event-stream"}
        )

    http = httpx.Client(transport=httpx.MockTransport(upstream))
    client = openai.OpenAI(api_key="k", base_url="http://up/v1", http_client=http)
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = OpenAIClientWrapper(client, m)
        stream = wrapped.responses.create(model="gpt-x", input="hi there", stream=True)
        try:
            seen = [str(e.type) for e in stream]
        except openai.APIError:
            seen = ["raised"]
        assert seen == (["response.created", "error"] if "type" in error else ["raised"])
        assert m.flush(10)
    assert exp.results == []
    assert exp.no_replies == Counter({"error": 1})


@pytest.mark.parametrize("error", ERRORS, ids=ERROR_IDS)
def test_serve_reads_the_same_error_stream_as_the_wrappers_do(error: dict[str, Any]) -> None:
    """``handoffmon serve`` in front of an upstream sending the same bytes: the client gets
    them unchanged, and the stream is no turn, counted ``error`` (``responses_without_reply``
    and ``unmonitored{reason="no_reply"}``), the wrappers' verdict."""
    import httpx

    from tests.proxy.conftest import proxy_config, running_proxy
    from tests.proxy.turn_counts import sample

    body = _error_stream(error)

    async def upstream(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        await _sse_upstream(body, send)

    with (
        ServerThread(upstream, free_port()) as srv,
        running_proxy(proxy_config(srv.url, rules=CONFIG_RULES)) as p,
    ):
        r = httpx.post(
            f"{p.url}/v1/responses", json={"model": "gpt-x", "input": "hi there", "stream": True}, timeout=10
        )
        assert r.status_code == 200 and r.content == body
        assert p.monitor.flush(10)
        assert sample(p, "handoffmon_responses_without_reply_total", {"status": "error"}) == 1
        assert sample(p, "handoffmon_proxy_unmonitored_requests_total", {"reason": "no_reply"}) == 1
        assert p.monitor.snapshot().total_turns == 0
