"""A Responses API call made with ``background=True`` answers at once with the response
``queued`` (or ``in_progress``) and no output: the reply comes later, through
``responses.retrieve`` or a stream. That answer is no turn — recorded, it would be an empty
reply failing every rule, charged to the model — so no adapter records one; a call that did
finish with a reply is recorded as always (one that finished without a reply, ``failed`` say,
is no turn either: ``test_responses_no_reply.py``).

A real ``openai`` client (sync and async, with and without metadata, which moves the request
read onto the request path), a real ``litellm.Router`` and the LiteLLM Proxy callback's hook
all talk HTTP to a loopback upstream (``BackgroundUpstream``)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from handoffmon.integrations.litellm_callback import HandoffmonCallback
from handoffmon.integrations.openai_client import OpenAIClientWrapper
from handoffmon.integrations.router import RouterWrapper
from handoffmon.testing import RecordingExporter
from tests.conftest import free_port
from tests.pipeline.helpers import make_config, monitor, runtime
from tests.proxy.mock_upstream import ServerThread, read_request

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

CONFIG = make_config(
    rules=[{"name": "says_enough", "check": "length", "params": {"unit": "words", "min": 3}}]
)
REPLY = "a finished reply of several words"


def response_doc(rid: str, status: str) -> dict[str, Any]:
    """A Responses API response ``rid`` in ``status``; a ``completed`` one carries a reply that
    passes ``says_enough``, the others no output."""
    doc: dict[str, Any] = {
        "id": rid,
        "object": "response",
        "created_at": 1,
        "model": "gpt-bg",
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "status": status,
        "output": [],
    }
    if status == "completed":
        text = {"type": "output_text", "text": REPLY, "annotations": []}
        message = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed"}
        doc.update(
            output=[{**message, "content": [text]}],
            usage={"input_tokens": 3, "output_tokens": 6, "total_tokens": 9},
        )
    else:
        doc["background"] = True
    return doc


async def send_doc(send: Any, doc: dict[str, Any]) -> None:
    """Answer 200 with ``doc`` as JSON."""
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": json.dumps(doc).encode()})


class BackgroundUpstream:
    """``POST /v1/responses``: ``queued`` with no output for ``background: true``, else a
    completed response whose reply passes ``says_enough``."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = await read_request(scope, receive, send)
        if body is None:
            return
        req = json.loads(body)
        status = "queued" if req.get("background") else "completed"
        await send_doc(send, response_doc(f"resp_{free_port()}", status))


@pytest.fixture(scope="module")
def api_base() -> Iterator[str]:
    with ServerThread(BackgroundUpstream(), free_port()) as srv:
        yield f"{srv.url}/v1"


def _verdicts(exp: RecordingExporter) -> list[tuple[str, str]]:
    return [(c.rule, c.verdict) for r in exp.results for c in r.checks]


@pytest.mark.parametrize("is_async", [False, True])
@pytest.mark.parametrize("metadata", [None, {"tags": "bg"}])
async def test_a_wrapped_client_records_no_turn_for_a_queued_background_response(
    api_base: str, is_async: bool, metadata: Any
) -> None:
    """The queued answer is the application's, unchanged; only the finished call is a turn."""
    exp = RecordingExporter()
    extra = {} if metadata is None else {"metadata": metadata}
    with monitor(CONFIG, exporters=[exp]) as m:
        raw = openai.AsyncOpenAI if is_async else openai.OpenAI
        client = OpenAIClientWrapper(raw(api_key="k", base_url=api_base, max_retries=0), m)
        for background in (True, False):
            call = client.responses.create(model="gpt-bg", input="hi", background=background, **extra)
            response = await call if is_async else call
            assert response.status == ("queued" if background else "completed")
        assert m.flush(10)
    assert _verdicts(exp) == [("says_enough", "pass")]


@pytest.mark.parametrize("mode", ["sync", "async", "metadata"])
async def test_a_wrapped_router_records_no_turn_for_a_queued_background_response(
    api_base: str, mode: str
) -> None:
    """``Router.responses`` / ``aresponses`` (read later, or on the request path with metadata)."""
    from litellm import Router

    params = {"model": "openai/gpt-bg", "api_key": "k", "api_base": api_base}
    router = Router(model_list=[{"model_name": "bg", "litellm_params": params}], num_retries=0)
    exp = RecordingExporter()
    extra = {"metadata": {"tags": ["bg"]}} if mode == "metadata" else {}
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = RouterWrapper(router, m)
        for background in (True, False):
            if mode == "sync":
                response = wrapped.responses(model="bg", input="hi", background=background)
            else:
                response = await wrapped.aresponses(model="bg", input="hi", background=background, **extra)
            assert response.status == ("queued" if background else "completed")
        assert m.flush(10)
    assert _verdicts(exp) == [("says_enough", "pass")]


async def test_the_proxy_callback_records_no_turn_for_a_queued_background_response(api_base: str) -> None:
    """The success hook of a proxy's ``/v1/responses`` call."""
    from litellm import Router

    params = {"model": "openai/gpt-bg", "api_key": "k", "api_base": api_base}
    router = Router(model_list=[{"model_name": "bg", "litellm_params": params}], num_retries=0)
    exp = RecordingExporter()
    with runtime(CONFIG, exporters=[exp]) as rt:
        cb, m = HandoffmonCallback(runtime=rt), rt.monitor
        for i, background in enumerate((True, False)):
            data = {"model": "bg", "input": "hi", "background": background, "litellm_call_id": f"bg-{i}"}
            await cb.async_pre_call_hook(None, None, data, "aresponses")
            response = await router.aresponses(model="bg", input="hi", background=background)
            assert await cb.async_post_call_success_hook(data, None, response) is None
        assert m.flush(10)
    assert _verdicts(exp) == [("says_enough", "pass")]


def test_an_odd_status_is_read_as_before() -> None:
    """``RESPONSES.as_chat`` stays total: a status that is no string (an upstream's odd JSON,
    even an unhashable one) reads the response as before. queued/in_progress are ``None`` (the
    reply is still to come: a background call stays parked), which is not what a finished
    response without a reply reads as (``NoReply``: no turn, and final)."""
    from handoffmon.ingress.apis import RESPONSES
    from handoffmon.ingress.responses import NoReply

    item = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": REPLY}]}
    for status in ([], {"a": 1}, None, 3, "completed", "incomplete"):
        doc = RESPONSES.as_chat({"id": "r", "status": status, "output": [item]})
        assert doc is not None and doc["choices"][0]["message"]["content"] == REPLY
    for status in ("queued", "in_progress"):
        assert RESPONSES.as_chat({"id": "r", "status": status, "output": [item]}) is None
    for status in ("failed", "cancelled"):
        assert RESPONSES.as_chat({"id": "r", "status": status, "output": [item]}) == NoReply(status)
