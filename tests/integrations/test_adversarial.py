"""Standing adversarial suite for the in-process wrappers: whatever a client or upstream sends,
the application sees exactly what it would see without handoffmon.

Hypothesis generates message lists (odd roles, content shapes, tool calls, non-ASCII, huge
strings), request metadata (junk and hostile ``handoffmon`` rule declarations) and, for the
OpenAI client, upstream replies (JSON bodies, odd SSE chunks such as ``tool_calls[].index``
null or ``"x"``, ``choices: 1``, error statuses). Each call goes through the wrapped
``litellm.Router`` (mock_response) or the wrapped ``openai.OpenAI`` client against a local
HTTP server (through ``create``, ``with_raw_response`` and ``with_streaming_response``), and
again unwrapped; the results (response objects, streamed chunks) and
exceptions (type and message) must be identical, and the wrapper must hand back the very
object the router returned.

Size: ``HANDOFFMON_FUZZ_EXAMPLES`` examples for the router, a third of it per kind of upstream
reply for the client (default 25, a few seconds, the same examples every run); a longer, randomized run:
``HANDOFFMON_FUZZ_EXAMPLES=2000 .venv/bin/python -m pytest tests/integrations/test_adversarial.py``.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handoffmon.integrations.openai_client import OpenAIClientWrapper
from handoffmon.integrations.router import RouterWrapper
from handoffmon.pipeline.monitor import Monitor
from tests.conftest import free_port
from tests.integrations.routers import Spy
from tests.pipeline.helpers import make_config
from tests.proxy.mock_upstream import ServerThread, read_request

EXAMPLES = int(os.environ.get("HANDOFFMON_FUZZ_EXAMPLES", "25"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=EXAMPLES <= 25,  # the default run is the same every time; longer runs explore
)
PER_KIND = settings(FUZZ, max_examples=max(1, EXAMPLES // 3))
CONFIG = make_config(refit={"interval_s": 0}, request_rules={"max_names": 8})

# -- inputs ---------------------------------------------------------------------------------

TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", " ", "\x00", "\ud7ff", "ü" * 3, '{"a":', "data: [DONE]", "A" * 5000]),
)
JSON_LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=False), TEXT
)
JSON = st.recursive(
    JSON_LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
TOOL_CALL = st.fixed_dictionaries(
    {
        "id": TEXT,
        "type": st.sampled_from(["function", "x"]),
        "function": st.fixed_dictionaries({"name": TEXT, "arguments": TEXT}),
    }
)
CONTENT = st.one_of(
    TEXT,
    st.none(),
    st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}), max_size=3),
)
MESSAGE = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "developer"]), "content": TEXT}),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": CONTENT},
        optional={"tool_calls": st.lists(TOOL_CALL, max_size=2), "name": TEXT},
    ),
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": TEXT, "content": TEXT}),
)
MESSAGES = st.lists(MESSAGE, min_size=1, max_size=8)
RULE = st.fixed_dictionaries(
    {
        "name": st.one_of(TEXT, st.sampled_from(["all", "other", "r1", "this:Nope"])),
        "check": st.one_of(
            TEXT, st.sampled_from(["length", "no_commas", "pydantic_model", "ifeval:keywords:existence"])
        ),
    },
    optional={"params": st.one_of(JSON, st.just({"model": "this:Nope"}))},
)
METADATA = st.one_of(
    st.none(),
    st.dictionaries(st.text(max_size=8), JSON, max_size=3),
    st.fixed_dictionaries(
        {
            "handoffmon": st.one_of(
                JSON, st.fixed_dictionaries({"rules": st.one_of(JSON, st.lists(RULE, max_size=4))})
            )
        },
        optional={"conversation_id": st.one_of(TEXT, JSON)},
    ),
)


def _same(a: Any, b: Any) -> Any:
    """The comparable form of a response: everything but the per-call id and timestamps."""
    if hasattr(a, "model_dump"):
        a = a.model_dump(warnings=False)
    if isinstance(a, dict):
        return {k: _same(v, b) for k, v in a.items() if k not in ("id", "created", "response_ms")}
    if isinstance(a, list):
        return [_same(v, b) for v in a]
    return a


def _view(obj: Any) -> Any:
    """What the application sees of an SDK object: its type and every field, odd ones included."""
    dump = obj.model_dump(warnings=False) if hasattr(obj, "model_dump") else obj
    return type(obj).__name__, dump


def _outcome(fn: Any) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except Exception as exc:  # the application's view of a failure: its type and message
        return "raised", (type(exc).__name__, str(exc))


# -- litellm.Router ---------------------------------------------------------------------------


def _router() -> Any:
    from litellm import Router

    return Router(
        model_list=[{"model_name": "alpha", "litellm_params": {"model": "openai/gpt-c", "api_key": "k"}}],
        num_retries=0,
    )


@pytest.fixture(scope="module")
def monitored() -> Iterator[Monitor]:
    m = Monitor(CONFIG)
    yield m
    m.close(10)


@FUZZ
@given(
    messages=MESSAGES,
    metadata=METADATA,
    reply=st.one_of(TEXT, st.just("litellm.RateLimitError"), st.just("litellm.BadRequestError")),
    stream=st.booleans(),
)
def test_wrapped_router_returns_what_the_router_returns(
    monitored: Monitor, messages: list[Any], metadata: Any, reply: str, stream: bool
) -> None:
    """Same response (the very object), same chunks (the very objects), same exception."""
    plain, spied = _router(), _router()
    spy = Spy(spied)
    wrapped = RouterWrapper(spied, monitored)
    kwargs: dict[str, Any] = {"mock_response": reply, "stream": stream}
    if metadata is not None:
        kwargs["metadata"] = metadata
    sent = copy.deepcopy((messages, kwargs))

    def call(router: Any) -> Any:
        msgs, kw = copy.deepcopy((messages, kwargs))
        out = router.completion(model="alpha", messages=msgs, **kw)
        return list(out) if stream else out

    direct = _outcome(lambda: call(plain))
    through = _outcome(lambda: call(wrapped))
    assert (messages, kwargs) == sent  # nothing the application passed was changed
    assert through[0] == direct[0], (through, direct)
    if direct[0] == "raised":
        assert through[1] == direct[1]
        return
    assert _same(through[1], None) == _same(direct[1], None)
    if stream:
        assert len(spy.chunks) == len(through[1])
        assert all(a is b for a, b in zip(through[1], spy.chunks, strict=True))
    else:
        assert through[1] is spy.returned[-1]


# -- openai.OpenAI against a local HTTP server ---------------------------------------------

_CASES: dict[str, tuple[int, str, bytes]] = {}
_IDS = itertools.count()


async def _scripted(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers each request with the case named by its ``x-fuzz-case`` header."""
    if await read_request(scope, receive, send) is None:
        return
    headers = dict(scope["headers"])
    status, ctype, body = _CASES[headers[b"x-fuzz-case"].decode()]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", ctype.encode()), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with ServerThread(_scripted, free_port()) as srv:
        yield srv.url


CHUNK_DELTA = st.one_of(
    st.fixed_dictionaries({}, optional={"role": st.just("assistant"), "content": st.one_of(TEXT, st.none())}),
    st.fixed_dictionaries(
        {
            "tool_calls": st.one_of(
                st.integers(),
                TEXT,
                st.lists(
                    st.fixed_dictionaries(
                        {"index": st.one_of(st.none(), st.integers(-2, 3), st.just("x"))},
                        optional={
                            "id": TEXT,
                            "function": st.fixed_dictionaries({}, optional={"name": TEXT, "arguments": TEXT}),
                        },
                    ),
                    max_size=2,
                ),
            )
        }
    ),
    JSON,
)
CHUNK_OK = st.one_of(
    st.fixed_dictionaries(
        {
            "id": st.just("c1"),
            "object": st.just("chat.completion.chunk"),
            "created": st.just(1),
            "model": st.one_of(TEXT, st.sampled_from(["gpt-x", "other", "none"])),
            "choices": st.one_of(
                st.lists(
                    st.fixed_dictionaries(
                        {"index": st.just(0), "delta": CHUNK_DELTA},
                        optional={
                            "finish_reason": st.sampled_from([None, "stop", "length", "tool_calls", "zz"])
                        },
                    ),
                    max_size=2,
                ),
                st.integers(),
                st.none(),
            ),
        }
    ),
)
COMPLETION = st.one_of(
    st.fixed_dictionaries(
        {
            "id": st.just("x"),
            "object": st.just("chat.completion"),
            "created": st.just(1),
            "model": TEXT,
            "choices": st.one_of(
                st.lists(
                    st.fixed_dictionaries(
                        {
                            "index": st.just(0),
                            "message": st.fixed_dictionaries(
                                {"role": st.just("assistant"), "content": CONTENT}
                            ),
                            "finish_reason": st.sampled_from(["stop", "length", None]),
                        }
                    ),
                    max_size=2,
                ),
                JSON,
            ),
        }
    ),
    JSON,
)
SSE = st.tuples(st.lists(st.one_of(CHUNK_OK, CHUNK_OK, CHUNK_OK, JSON), max_size=6), st.booleans()).map(
    lambda c: (
        "".join(f"data: {json.dumps(x)}\n\n" for x in c[0]) + ("data: [DONE]\n\n" if c[1] else "")
    ).encode()
)
ERROR = st.tuples(
    st.sampled_from([400, 401, 404, 422, 429, 500, 503]),
    st.just("application/json"),
    JSON.map(lambda b: json.dumps({"error": b}).encode()),
)
GARBAGE = st.tuples(
    st.just(200),
    st.sampled_from(["application/json", "text/event-stream"]),
    st.sampled_from([b"", b"{", b"[]", b"\xff\xfe", b"data: {\n\n", b"data: [DONE]\n\n"]),
)


KINDS = ("sse", "json", "error", "garbage", "mismatched")
"""What the upstream answers: a stream, a completion, an error status, undecodable bytes, or
the other kind than the request asked for (a completion to ``stream=True`` and vice versa)."""


@st.composite
def exchanges(draw: st.DrawFn, kind: str) -> tuple[bool, tuple[int, str, bytes]]:
    """A request's ``stream`` flag and the upstream's reply of ``kind``."""
    sse = st.tuples(st.just(200), st.just("text/event-stream"), SSE)
    body = st.tuples(
        st.just(200), st.just("application/json"), COMPLETION.map(lambda b: json.dumps(b).encode())
    )
    if kind == "sse":
        return True, draw(sse)
    if kind == "json":
        return False, draw(body)
    stream = draw(st.booleans())
    if kind == "error":
        return stream, draw(ERROR)
    if kind == "garbage":
        return stream, draw(GARBAGE)
    return stream, draw(body if stream else sse)


VIAS = ("create", "with_raw_response", "with_streaming_response")
"""How the application makes the call: the resource's ``create``, or one of the SDK's views of it
(``sdk_views``; LangChain calls ``with_raw_response``)."""


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("kind", KINDS)
def test_wrapped_openai_client_sees_what_the_sdk_sees(
    server_url: str, monitored: Monitor, kind: str, via: str
) -> None:
    """Same parsed response, same chunks, same exception as the bare SDK on the same bytes,
    whichever way the call is made."""

    @PER_KIND
    @given(messages=MESSAGES, exchange=exchanges(kind))
    def check(messages: list[Any], exchange: tuple[bool, tuple[int, str, bytes]]) -> None:
        _compare(server_url, monitored, messages, exchange, via)

    check()


def _made(client: Any, via: str, stream: bool, **kwargs: Any) -> Any:
    """The call made ``via`` one way, read as the application would: the parsed completion, or
    the chunks."""
    completions = client.chat.completions
    if via == "with_streaming_response":
        with completions.with_streaming_response.create(stream=stream, **kwargs) as response:
            out = response.parse()
            return [_view(c) for c in out] if stream else _view(out)
    out = (
        completions.with_raw_response.create(stream=stream, **kwargs).parse()
        if via == "with_raw_response"
        else completions.create(stream=stream, **kwargs)
    )
    return [_view(c) for c in out] if stream else _view(out)


def _compare(
    server_url: str,
    monitored: Monitor,
    messages: list[Any],
    exchange: tuple[bool, tuple[int, str, bytes]],
    via: str = "create",
) -> None:
    stream, reply = exchange
    case = str(next(_IDS))
    _CASES[case] = reply
    plain = openai.OpenAI(api_key="k", base_url=f"{server_url}/v1", max_retries=0)
    wrapped = OpenAIClientWrapper(
        openai.OpenAI(api_key="k", base_url=f"{server_url}/v1", max_retries=0), monitored
    )

    def call(client: Any) -> Any:
        return _made(
            client,
            via,
            stream,
            model="gpt-x",
            messages=copy.deepcopy(messages),
            extra_headers={"x-fuzz-case": case},
        )

    try:
        direct = _outcome(lambda: call(plain))
        through = _outcome(lambda: call(wrapped))
        assert through == direct
        print(
            "CASE",
            stream,
            reply[0],
            reply[1],
            direct[0],
            len(direct[1]) if stream and direct[0] == "ok" else "-",
            str(direct[1])[:80] if direct[0] == "raised" else "",
        )
    finally:
        plain.close()
        wrapped.client.close()
        del _CASES[case]
