"""One table, four adapters: the router wrapper, the OpenAI client wrapper, the LiteLLM callback and serve.

Every case goes through every adapter the way that adapter meets it in production (a
router's response objects, the OpenAI SDK over HTTP, LiteLLM Proxy's hook arguments,
raw bytes through ``handoffmon serve``), and must come out the same: the reply handoffmon
recorded is the message a client resends (checked by attributing the next turn by its
chain fingerprint — a doubled tool-call name or a lost argument would break the chain),
the reply text the checkers saw, the author, odd chunks counted as parse errors, and the
conversation id read from every source each adapter supports. Chat completions streams the
upstream fails, completions with no reply to read, and Responses and Messages API event
streams (complete, cut off, error before or after text, refusal, incomplete) make the same
turn or the same no-reply status in every adapter.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import litellm
import openai
import pytest

from handoffmon.integrations.anthropic_client import AnthropicClientWrapper
from handoffmon.integrations.litellm_callback import HandoffmonCallback
from handoffmon.integrations.openai_client import OpenAIClientWrapper
from handoffmon.integrations.router import RouterWrapper
from handoffmon.proxy.app import create_app
from handoffmon.proxy.server import uvicorn_options
from handoffmon.runtime import Runtime
from handoffmon.types import TurnResult
from tests.conftest import free_port
from tests.integrations.test_responses_no_reply import CREATED
from tests.pipeline.helpers import RecordingExporter, make_config, runtime
from tests.proxy.mock_upstream import ServerThread, read_request

DEP, MODEL = "dep-x", "openai/gpt-x"
"""Who serves every reply: a deployment id and its provider model string (the expected author)."""

HEADERS = {"x-litellm-model-id": DEP, "x-litellm-model-name": MODEL, "x-litellm-attempted-fallbacks": "1"}
HIDDEN = {"model_id": DEP, "litellm_model_name": MODEL, "additional_headers": HEADERS}

TOOL_REPLY = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
    ],
}


def _chunk(delta: Any = None, *, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "delta": {} if delta is None else delta, "finish_reason": finish}
    return {
        "id": "chatcmpl-9",
        "object": "chat.completion.chunk",
        "model": "gpt-x-2024",
        "choices": [choice],
        **extra,
    }


@dataclass(frozen=True)
class Case:
    """A reply as the upstream sends it, and what every adapter must make of it.

    Attributes:
        message: the non-streamed reply message (``None``: only streamed).
        chunks: the streamed reply as chunk dicts (``None``: only non-streamed).
        resent: the assistant message a client sends back next turn.
        text_chars: length of the reply text the checkers see.
        odd: chunks that cannot be folded (each counted as monitor_errors{stage="parse"}).
        error: the stream's last chunk is the upstream's ``{"error": ...}`` object (the OpenAI
            SDK raises ``APIError`` for it; LiteLLM's stream raises its ``APIError``; serve
            forwards the bytes): the caller's iteration raises.
        body: fields that replace the non-streamed completion's (its ``choices``: a reply
            with nothing to read).
    """

    message: dict[str, Any] | None
    chunks: list[dict[str, Any]] | None
    resent: dict[str, Any]
    text_chars: int
    odd: int = 0
    error: bool = False
    body: dict[str, Any] = field(default_factory=dict)


UPSTREAM_ERROR = {"error": {"message": "The server is overloaded", "type": "server_error", "code": None}}
"""What an OpenAI-compatible upstream sends in a chat stream when it fails it."""

CASES: dict[str, Case] = {
    "text": Case(
        {"role": "assistant", "content": "Hello there"},
        [
            _chunk({"role": "assistant", "content": ""}),
            _chunk({"content": "Hello"}),
            _chunk({"content": " there"}),
            _chunk(finish="stop"),
        ],
        {"role": "assistant", "content": "Hello there"},
        11,
    ),
    "tool_calls": Case(
        TOOL_REPLY,
        [
            _chunk(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ],
                }
            ),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
            # a provider that repeats the name must not double it (it arrives once; a repeat replaces)
            _chunk(
                {"tool_calls": [{"index": 0, "function": {"name": "get_weather", "arguments": '"Paris"}'}}]}
            ),
            _chunk(finish="tool_calls"),
        ],
        TOOL_REPLY,
        0,
    ),
    "content_parts": Case(
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "two"}],
        },
        None,
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "two"}],
        },
        len("part one\ntwo"),
    ),
    "null_content": Case(
        {"role": "assistant", "content": None},
        [_chunk({"role": "assistant"}), _chunk(finish="stop")],
        {"role": "assistant", "content": None},
        0,
    ),
    "odd_chunks": Case(
        None,
        [
            _chunk({"role": "assistant", "content": "Hi"}),
            _chunk({"tool_calls": [{"index": None, "function": {"name": "f", "arguments": "{}"}}]}),
            _chunk({"tool_calls": [{"index": "x", "function": {"arguments": "{}"}}]}),
            _chunk({"tool_calls": 5}),
            {"id": "chatcmpl-9", "model": "gpt-x-2024", "choices": 1},
            _chunk(" not a delta"),
            _chunk({"content": " you"}),
            _chunk(finish="stop"),
        ],
        {"role": "assistant", "content": "Hi you"},
        6,
        odd=5,
    ),
    # the upstream's error after some text: a cut-off turn keeping the text, as a dropped stream
    "error_after_text": Case(
        None,
        [_chunk({"role": "assistant", "content": "Half a"}), _chunk({"content": " reply"}), UPSTREAM_ERROR],
        {"role": "assistant", "content": "Half a reply"},
        12,
        error=True,
    ),
}

NO_REPLY: dict[str, Case] = {
    # the upstream's error before any text: no reply (no turn, counted ``error``), as the
    # Responses and Messages APIs' streams are — not an empty reply for the rules to judge
    "error_first": Case(None, [UPSTREAM_ERROR], {"role": "assistant", "content": None}, 0, error=True),
    "error_after_role": Case(
        None,
        [_chunk({"role": "assistant", "content": ""}), UPSTREAM_ERROR],
        {"role": "assistant", "content": None},
        0,
        error=True,
    ),
}

UNREADABLE: dict[str, Case] = {
    # a completion with no reply in it to read: no turn, counted ``unreadable`` (serve also
    # counts it ``unmonitored{reason="bad_reply"}``, as before)
    "no_choice": Case({}, None, {}, 0, body={"choices": []}),
    "null_choices": Case({}, None, {}, 0, body={"choices": None}),
    "choice_without_message": Case(
        {}, None, {}, 0, body={"choices": [{"index": 0, "finish_reason": "stop"}]}
    ),
}

STREAMED = [(name, s) for name, c in CASES.items() for s in (False, True) if (c.chunks if s else c.message)]

ID_SOURCES = (
    "configured_header",
    "conversation_header",
    "session_header",
    "metadata_conversation_id",
    "metadata_session_id",
    "session_param",
    "metadata_otel",
)


def _completion(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-9",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-x-2024",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
    }


def _body(case: Case) -> dict[str, Any]:
    """The non-streamed completion the upstream sends for ``case``."""
    assert case.message is not None
    return {**_completion(case.message), **case.body}


def _sse(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


# -- id carriers: where each adapter's callers put a conversation id --------------------------


def _metadata_key(source: str) -> str | None:
    return {
        "metadata_conversation_id": "conversation_id",
        "metadata_session_id": "session_id",
        "metadata_otel": "gen_ai.conversation.id",
    }.get(source)


def _header(source: str) -> str | None:
    return {
        "configured_header": "X-Chat-Id",
        "conversation_header": "X-Conversation-Id",
        "session_header": "x-litellm-session-id",
    }.get(source)


@dataclass
class Call:
    """One request in adapter-neutral terms."""

    messages: list[dict[str, Any]]
    stream: bool
    metadata: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    session: str | None = None

    @classmethod
    def of(cls, messages: list[dict[str, Any]], stream: bool, source: str | None, cid: str) -> Call:
        call = cls(messages, stream)
        if source is None:
            return call
        if (key := _metadata_key(source)) is not None:
            call.metadata[key] = cid
        elif (name := _header(source)) is not None:
            call.headers[name] = cid
        else:
            call.session = cid
        return call


# -- the four adapters ----------------------------------------------------------------------------


class _Stream:
    """A router/LiteLLM stream object: iterable, async-iterable, with ``_hidden_params``."""

    def __init__(self, chunks: list[dict[str, Any]]) -> None:
        self._chunks = chunks
        self._hidden_params = HIDDEN

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for c in self._chunks:
            if (
                isinstance(c, dict) and "error" in c
            ):  # LiteLLM's stream raises the upstream's error, with its status
                raise litellm.APIError(500, c["error"]["message"], "openai", "gpt-x")
            yield c

    async def __aiter__(self) -> Any:
        for c in self:
            yield c


class _ScriptedRouter:
    """A litellm-style router answering the current case (responses carry ``_hidden_params``)."""

    case: Case

    def completion(self, model: str, messages: list[Any], **kwargs: Any) -> Any:
        if kwargs.get("stream"):
            assert self.case.chunks is not None
            return _Stream(self.case.chunks)
        assert self.case.message is not None
        return {**_body(self.case), "_hidden_params": HIDDEN}

    async def acompletion(self, model: str, messages: list[Any], **kwargs: Any) -> Any:
        return self.completion(model, messages, **kwargs)

    def responses(self, **kwargs: Any) -> Any:
        assert kwargs.get("stream") and self.events is not None
        return _Stream(self.events)

    events: list[dict[str, Any]] | None = None
    message_bytes: list[bytes] | None = None

    async def aanthropic_messages(self, **kwargs: Any) -> Any:
        assert kwargs.get("stream") and self.message_bytes is not None
        return _Stream(self.message_bytes)  # type: ignore[arg-type]


def _drain(case: Case, stream: Any) -> None:
    """Read ``stream`` to its end as the caller would; it raises just when the case ends in
    the upstream's error."""
    try:
        list(stream)
    except (litellm.APIError, openai.APIError):
        assert case.error
    else:
        assert not case.error


class Adapter:
    name: str
    rt: Runtime

    def send(self, case: Case, call: Call) -> None:
        raise NotImplementedError


class RouterAdapter(Adapter):
    name = "router"

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.router = _ScriptedRouter()
        self.wrapped = RouterWrapper(self.router, rt.monitor)

    def send(self, case: Case, call: Call) -> None:
        self.router.case = case
        kwargs: dict[str, Any] = {"stream": call.stream} if call.stream else {}
        if call.metadata:
            kwargs["metadata"] = call.metadata
        if call.headers:
            kwargs["extra_headers"] = call.headers
        if call.session is not None:
            kwargs["litellm_session_id"] = call.session
        out = self.wrapped.completion(model="g", messages=call.messages, **kwargs)
        if call.stream:
            _drain(case, out)


class OpenAIAdapter(Adapter):
    name = "openai"

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.case: Case | None = None
        transport = httpx.MockTransport(self._answer)
        client = openai.OpenAI(
            api_key="k", base_url="http://proxy.invalid/v1", http_client=httpx.Client(transport=transport)
        )
        self.wrapped = OpenAIClientWrapper(client, rt.monitor)

    events: bytes | None = None

    def _answer(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith(("/responses", "/messages")):
            assert self.events is not None
            return httpx.Response(
                200, headers={**HEADERS, "content-type": "text/event-stream"}, content=self.events
            )
        assert self.case is not None
        if json.loads(request.content).get("stream"):
            assert self.case.chunks is not None
            headers = {**HEADERS, "content-type": "text/event-stream"}
            return httpx.Response(200, headers=headers, content=_sse(self.case.chunks))
        assert self.case.message is not None
        return httpx.Response(200, headers=HEADERS, json=_body(self.case))

    def send(self, case: Case, call: Call) -> None:
        self.case = case
        kwargs: dict[str, Any] = {"model": "g", "messages": call.messages, "stream": call.stream}
        if call.metadata:
            kwargs["extra_body"] = {"metadata": call.metadata}
        if call.session is not None:
            kwargs.setdefault("extra_body", {})["litellm_session_id"] = call.session
        if call.headers:
            kwargs["extra_headers"] = call.headers
        out = self.wrapped.chat.completions.create(**kwargs)
        if call.stream:
            _drain(case, out)


class CallbackAdapter(Adapter):
    name = "litellm_callback"

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.cb = HandoffmonCallback(runtime=rt)
        self.n = 0

    def send(self, case: Case, call: Call) -> None:
        self.n += 1
        data: dict[str, Any] = {
            "model": "g",
            "messages": call.messages,
            "litellm_call_id": f"call-{self.n}",
            # LiteLLM Proxy keeps the caller's metadata as requester_metadata
            "metadata": {"requester_metadata": dict(call.metadata), "user_api_key": "hashed"},
            "proxy_server_request": {"headers": {"authorization": "Bearer sk-x", **call.headers}},
        }
        if call.session is not None:
            data["litellm_session_id"] = call.session
        asyncio.run(self._send(case, call, data))

    async def _send(self, case: Case, call: Call, data: dict[str, Any]) -> None:
        await self.cb.async_pre_call_hook(None, None, data, "acompletion")
        if call.stream:
            assert case.chunks is not None
            hook = self.cb.async_post_call_streaming_iterator_hook(None, _Stream(case.chunks), data)
            try:
                [c async for c in hook]
            except (litellm.APIError, openai.APIError):
                assert case.error  # the hook passes the upstream's error on, unchanged
            else:
                assert not case.error
        else:
            assert case.message is not None
            response = _HiddenDict({**_body(case)})
            await self.cb.async_post_call_success_hook(data, None, response)


class _HiddenDict(dict):  # type: ignore[type-arg]
    """A JSON completion with LiteLLM's ``_hidden_params`` attribute, as the proxy's response has."""

    _hidden_params = HIDDEN


class _ScriptedUpstream:
    """ASGI upstream answering the current case with LiteLLM's headers."""

    case: Case

    events: bytes | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = await read_request(scope, receive, send)
        if body is None:
            return
        hdrs = [(k.encode(), v.encode()) for k, v in HEADERS.items()]
        if scope["path"].endswith(("/responses", "/messages")):
            assert self.events is not None
            payload, ctype = self.events, b"text/event-stream"
        elif json.loads(body).get("stream"):
            assert self.case.chunks is not None
            payload, ctype = _sse(self.case.chunks), b"text/event-stream"
        else:
            assert self.case.message is not None
            payload, ctype = json.dumps(_body(self.case)).encode(), b"application/json"
        start = [(b"content-type", ctype), (b"content-length", str(len(payload)).encode()), *hdrs]
        await send({"type": "http.response.start", "status": 200, "headers": start})
        await send({"type": "http.response.body", "body": payload})


class ServeAdapter(Adapter):
    name = "serve"

    def __init__(self, rt: Runtime, url: str, upstream: _ScriptedUpstream) -> None:
        self.rt = rt
        self.url = url
        self.upstream = upstream

    def send(self, case: Case, call: Call) -> None:
        self.upstream.case = case
        body: dict[str, Any] = {"model": "g", "messages": call.messages, "stream": call.stream}
        if call.metadata:
            body["metadata"] = call.metadata
        if call.session is not None:
            body["litellm_session_id"] = call.session
        r = httpx.post(f"{self.url}/v1/chat/completions", json=body, headers=call.headers, timeout=30)
        assert r.status_code == 200, r.text


CONFIG = make_config(attribution={"conversation_header": "x-chat-id"}, telemetry={"log_turns": False})


@pytest.fixture(scope="module")
def adapters() -> Iterator[dict[str, tuple[Adapter, RecordingExporter]]]:
    exporters = {name: RecordingExporter() for name in ("router", "openai", "litellm_callback", "serve")}
    rts = {name: runtime(CONFIG, exporters=[exp]) for name, exp in exporters.items()}
    upstream = _ScriptedUpstream()
    with ServerThread(upstream, free_port()) as up:
        cfg = make_config(
            attribution={"conversation_header": "x-chat-id"},
            telemetry={"log_turns": False},
            proxy={"upstream": up.url},
        )
        app = create_app(cfg, runtime=rts["serve"])
        with ServerThread(app, free_port(), **uvicorn_options(cfg)) as srv:
            built: list[Adapter] = [
                RouterAdapter(rts["router"]),
                OpenAIAdapter(rts["openai"]),
                CallbackAdapter(rts["litellm_callback"]),
                ServeAdapter(rts["serve"], srv.url, upstream),
            ]
            built[1].upstream = (upstream, up.url)  # type: ignore[attr-defined]  # for the Anthropic SDK
            yield {a.name: (a, exporters[a.name]) for a in built}
    for rt in rts.values():
        rt.close()


ADAPTERS = ("router", "openai", "litellm_callback", "serve")


def _results(adapter: Adapter, exp: RecordingExporter, n: int) -> list[TurnResult]:
    assert adapter.rt.flush(10)
    return exp.results[-n:]


@pytest.mark.parametrize(("case_name", "stream"), STREAMED)
@pytest.mark.parametrize("adapter_name", ADAPTERS)
def test_every_adapter_records_the_reply_a_client_resends(
    adapters: dict[str, tuple[Adapter, RecordingExporter]], adapter_name: str, case_name: str, stream: bool
) -> None:
    """Same reply through every adapter: the next turn attributes it by chain to the same author;
    the checkers saw the same text; odd chunks were skipped, folded around and counted."""
    adapter, exp = adapters[adapter_name]
    case = CASES[case_name]
    errors_before = adapter.rt.monitor.snapshot().monitor_errors.get("parse", 0)
    first = [{"role": "user", "content": f"{adapter_name} {case_name} {stream}"}]
    adapter.send(case, Call(first, stream))
    second = [*first, case.resent, {"role": "user", "content": "and then?"}]
    adapter.send(CASES["text"], Call(second, False))
    one, two = _results(adapter, exp, 2)
    assert one.record.author == MODEL and one.record.reply_chars == case.text_chars
    assert one.record.streamed is stream and one.record.fallbacks == 1
    assert one.record.deployment_id == DEP
    assert one.record.response_id == "chatcmpl-9"
    assert [(a.author, a.method) for a in two.context.attributions] == [(MODEL, "chain")]
    assert (two.context.depth, two.context.prefix_model) == (2, MODEL)
    parse_errors = adapter.rt.monitor.snapshot().monitor_errors.get("parse", 0) - errors_before
    assert parse_errors == case.odd


@pytest.mark.parametrize("source", ID_SOURCES)
@pytest.mark.parametrize("adapter_name", ADAPTERS)
def test_every_adapter_reads_the_conversation_id_from_every_source(
    adapters: dict[str, tuple[Adapter, RecordingExporter]], adapter_name: str, source: str
) -> None:
    """Configured header, X-Conversation-Id, x-litellm-session-id, metadata conversation_id /
    session_id / gen_ai.conversation.id and LiteLLM's litellm_session_id: one id, every adapter."""
    adapter, exp = adapters[adapter_name]
    cid = f"conv-{adapter_name}-{source}"
    adapter.send(CASES["text"], Call.of([{"role": "user", "content": cid}], False, source, cid))
    (result,) = _results(adapter, exp, 1)
    assert (result.context.conversation_id, result.context.conversation_id_source) == (cid, "caller")


@pytest.mark.parametrize("adapter_name", ADAPTERS)
def test_session_parameter_beats_a_metadata_key_of_the_same_name(
    adapters: dict[str, tuple[Adapter, RecordingExporter]], adapter_name: str
) -> None:
    """litellm_session_id sent both ways: the request parameter wins in every adapter."""
    adapter, exp = adapters[adapter_name]
    call = Call([{"role": "user", "content": f"both {adapter_name}"}], False)
    call.metadata["litellm_session_id"] = "from-metadata"
    call.session = f"param-{adapter_name}"
    adapter.send(CASES["text"], call)
    (result,) = _results(adapter, exp, 1)
    assert result.context.conversation_id == f"param-{adapter_name}"


@pytest.mark.parametrize("case_name", NO_REPLY)
@pytest.mark.parametrize("adapter_name", ADAPTERS)
def test_every_adapter_counts_a_chat_stream_failed_before_any_text_as_no_reply(
    adapters: dict[str, tuple[Adapter, RecordingExporter]], adapter_name: str, case_name: str
) -> None:
    """The upstream's error before any text: no turn, counted once as ``error`` in
    ``responses_without_reply``, in every adapter; the next call is recorded as usual."""
    adapter, exp = adapters[adapter_name]
    before, results = Counter(exp.no_replies), len(exp.results)
    first = [{"role": "user", "content": f"{adapter_name} {case_name}"}]
    adapter.send(NO_REPLY[case_name], Call(first, True))
    adapter.send(CASES["text"], Call([{"role": "user", "content": f"after {case_name}"}], False))
    assert adapter.rt.flush(10)
    assert len(exp.results) == results + 1
    assert exp.results[-1].record.reply_chars == CASES["text"].text_chars
    assert exp.no_replies - before == Counter({"error": 1})


@pytest.mark.parametrize("case_name", UNREADABLE)
@pytest.mark.parametrize("adapter_name", ADAPTERS)
def test_every_adapter_counts_a_completion_without_a_reply_to_read(
    adapters: dict[str, tuple[Adapter, RecordingExporter]], adapter_name: str, case_name: str
) -> None:
    """No choice, ``choices: null``, a choice without a message: no turn, counted once as
    ``unreadable`` in ``responses_without_reply`` by every adapter (serve counted it only as
    ``unmonitored{reason="bad_reply"}``, the in-process adapters not at all)."""
    adapter, exp = adapters[adapter_name]
    before, results = Counter(exp.no_replies), len(exp.results)
    adapter.send(
        UNREADABLE[case_name], Call([{"role": "user", "content": f"{adapter_name} {case_name}"}], False)
    )
    adapter.send(CASES["text"], Call([{"role": "user", "content": f"after {case_name}"}], False))
    assert adapter.rt.flush(10)
    assert len(exp.results) == results + 1
    assert exp.results[-1].record.reply_chars == CASES["text"].text_chars
    assert exp.no_replies - before == Counter({"unreadable": 1})


# -- Responses API event streams: one table, four adapters --------------------------------------

_RESPONSE = CREATED["response"]  # an in-progress response, as response.created carries it
_ITEM = {"id": "msg_1", "type": "message", "role": "assistant", "status": "in_progress", "content": []}


def _r_delta(text: str, kind: str = "output_text") -> dict[str, Any]:
    return {
        "type": f"response.{kind}.delta",
        "item_id": "msg_1",
        "output_index": 0,
        "content_index": 0,
        "delta": text,
    }


def _r_final(kind: str, status: str, content: list[dict[str, Any]] | None) -> dict[str, Any]:
    output = [] if content is None else [{**_ITEM, "status": "completed", "content": content}]
    details = {"reason": "max_output_tokens"} if status == "incomplete" else None
    return {
        "type": kind,
        "response": {**_RESPONSE, "status": status, "output": output, "incomplete_details": details},
    }


_R_START = [
    {"type": "response.created", "response": _RESPONSE},
    {"type": "response.output_item.added", "output_index": 0, "item": _ITEM},
]
_R_ERROR = {"type": "error", "code": "server_error", "message": "The server had an error"}
_HELLO = [{"type": "output_text", "text": "Hello there", "annotations": []}]

RESPONSES_STREAMS: dict[str, tuple[list[dict[str, Any]], int | str]] = {
    # events, and what every adapter must make of them: a turn of so many reply characters,
    # or no reply counted under that status
    "complete": (
        [
            *_R_START,
            _r_delta("Hello"),
            _r_delta(" there"),
            _r_final("response.completed", "completed", _HELLO),
        ],
        11,
    ),
    "cut_off": ([*_R_START, _r_delta("Hello")], 5),
    "error_before_text": ([*_R_START, _R_ERROR], "error"),
    "error_after_text": ([*_R_START, _r_delta("Hello"), _R_ERROR], 5),
    "refusal": (
        [
            *_R_START,
            _r_delta("I can't", "refusal"),
            _r_final("response.completed", "completed", [{"type": "refusal", "refusal": "I can't"}]),
        ],
        7,
    ),
    "incomplete_without_output": (
        [*_R_START, _r_final("response.incomplete", "incomplete", None)],
        "incomplete",
    ),
    "incomplete_with_text": (
        [
            *_R_START,
            _r_delta("Hello"),
            _r_final(
                "response.incomplete",
                "incomplete",
                [{"type": "output_text", "text": "Hello", "annotations": []}],
            ),
        ],
        5,
    ),
}


def _r_sse(events: list[dict[str, Any]]) -> bytes:
    out = []
    for n, e in enumerate(events):
        out.append(f"event: {e['type']}\ndata: {json.dumps({**e, 'sequence_number': n})}\n\n".encode())
    return b"".join(out)


def _send_responses(adapter: Adapter, events: list[dict[str, Any]], text: str) -> None:
    numbered = [{**e, "sequence_number": n} for n, e in enumerate(events)]
    if isinstance(adapter, RouterAdapter):
        adapter.router.events = numbered
        list(adapter.wrapped.responses(model="g", input=text, stream=True))
    elif isinstance(adapter, OpenAIAdapter):
        adapter.events = _r_sse(events)
        list(adapter.wrapped.responses.create(model="g", input=text, stream=True))
    elif isinstance(adapter, CallbackAdapter):
        adapter.n += 1
        data: dict[str, Any] = {
            "model": "g",
            "input": text,
            "stream": True,
            "litellm_call_id": f"r-{adapter.n}",
        }

        async def run() -> None:
            await adapter.cb.async_pre_call_hook(None, None, data, "aresponses")
            [
                c
                async for c in adapter.cb.async_post_call_streaming_iterator_hook(
                    None, _Stream(numbered), data
                )
            ]

        asyncio.run(run())
    else:
        assert isinstance(adapter, ServeAdapter)
        adapter.upstream.events = _r_sse(events)
        r = httpx.post(
            f"{adapter.url}/v1/responses", json={"model": "g", "input": text, "stream": True}, timeout=30
        )
        assert r.status_code == 200 and r.content == _r_sse(events)


@pytest.mark.parametrize("case_name", RESPONSES_STREAMS)
@pytest.mark.parametrize("adapter_name", ADAPTERS)
def test_every_adapter_reads_a_responses_stream_alike(
    adapters: dict[str, tuple[Adapter, RecordingExporter]], adapter_name: str, case_name: str
) -> None:
    """The same Responses API events through every adapter: the same turn (its reply's
    length) or the same no-reply status, counted once."""
    events, expected = RESPONSES_STREAMS[case_name]
    _assert_read_alike(
        adapters[adapter_name], expected, _send_responses, events, f"{adapter_name} responses {case_name}"
    )


def _assert_read_alike(
    adapter_exp: tuple[Adapter, RecordingExporter],
    expected: int | str,
    send: Callable[[Adapter, Any, str], Any],
    events: Any,
    label: str,
) -> None:
    """``events`` sent through ``adapter`` give one turn of ``expected`` reply characters, or
    (a string) one no-reply of that status and no turn."""
    adapter, exp = adapter_exp
    before, results = Counter(exp.no_replies), len(exp.results)
    send(adapter, events, label)
    assert adapter.rt.flush(10)
    if isinstance(expected, str):
        assert (len(exp.results), exp.no_replies - before) == (results, Counter({expected: 1}))
    else:
        assert (len(exp.results), exp.no_replies - before) == (results + 1, Counter())
        assert exp.results[-1].record.reply_chars == expected


# -- Anthropic Messages API event streams: one table, four adapters -----------------------------
# (the OpenAI adapter's slot is taken by the Anthropic SDK client, wrapped, over the same HTTP)

_M_START = [
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 1},
        },
    },
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
]
_M_ERROR = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def _m_text(text: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}


def _m_end(reason: str) -> list[dict[str, Any]]:
    return [
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": None},
            "usage": {"output_tokens": 2},
        },
        {"type": "message_stop"},
    ]


MESSAGES_STREAMS: dict[str, tuple[list[dict[str, Any]], int | str]] = {
    "complete": ([*_M_START, _m_text("Hello"), _m_text(" there"), *_m_end("end_turn")], 11),
    "cut_off": ([*_M_START, _m_text("Hello")], 5),
    "error_before_text": ([*_M_START, _M_ERROR], "error"),
    "error_after_text": ([*_M_START, _m_text("Hello"), _M_ERROR], 5),
    "refusal_before_text": ([*_M_START, *_m_end("refusal")], "refusal"),
    "refusal_after_text": ([*_M_START, _m_text("Hello"), *_m_end("refusal")], 5),
    "max_tokens_with_text": ([*_M_START, _m_text("Hello"), *_m_end("max_tokens")], 5),
}


def _m_sse(events: list[dict[str, Any]]) -> list[bytes]:
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]


def _send_messages(adapter: Adapter, events: list[dict[str, Any]], text: str) -> None:
    body = {"model": "g", "max_tokens": 64, "messages": [{"role": "user", "content": text}], "stream": True}
    raw = _m_sse(events)
    if isinstance(adapter, RouterAdapter):
        adapter.router.message_bytes = raw

        async def run_router() -> None:
            [c async for c in await adapter.wrapped.aanthropic_messages(**body)]

        asyncio.run(run_router())
    elif isinstance(adapter, OpenAIAdapter):
        upstream, url = adapter.upstream  # type: ignore[attr-defined]  # the SDK over its own HTTP client
        upstream.events = b"".join(raw)
        client = AnthropicClientWrapper(
            anthropic.Anthropic(api_key="k", base_url=url, max_retries=0), adapter.rt.monitor
        )
        try:
            list(client.messages.create(**body))
        except anthropic.APIStatusError:  # the SDK raises the error event
            assert any(e["type"] == "error" for e in events)
    elif isinstance(adapter, CallbackAdapter):
        adapter.n += 1
        data: dict[str, Any] = {
            **body,
            "litellm_call_id": f"m-{adapter.n}",
            "proxy_server_request": {"url": "http://proxy/v1/messages", "headers": {}},
        }

        async def run_callback() -> None:
            await adapter.cb.async_pre_call_hook(None, None, data, "anthropic_messages")
            [c async for c in adapter.cb.async_post_call_streaming_iterator_hook(None, _Stream(raw), data)]  # type: ignore[arg-type]

        asyncio.run(run_callback())
    else:
        assert isinstance(adapter, ServeAdapter)
        adapter.upstream.events = b"".join(raw)
        r = httpx.post(f"{adapter.url}/v1/messages", json=body, timeout=30)
        assert r.status_code == 200 and r.content == b"".join(raw)


@pytest.mark.parametrize("case_name", MESSAGES_STREAMS)
@pytest.mark.parametrize("adapter_name", ADAPTERS)
def test_every_adapter_reads_a_messages_stream_alike(
    adapters: dict[str, tuple[Adapter, RecordingExporter]], adapter_name: str, case_name: str
) -> None:
    """The same Anthropic Messages API events through every adapter (the Anthropic SDK in the
    OpenAI client's slot): the same turn (its reply's length) or the same no-reply status."""
    events, expected = MESSAGES_STREAMS[case_name]
    _assert_read_alike(
        adapters[adapter_name], expected, _send_messages, events, f"{adapter_name} messages {case_name}"
    )
