"""Standing adversarial suite for ``serve``: generated requests, headers and SSE streams, direct vs proxied.

Each example is sent to a real upstream (the scripted uvicorn app) directly and through a
running ``serve``; the client must see the same status, the same headers (apart from
``date``/``server``), the same body bytes — or, when the upstream breaks the stream off,
the same failure — and the upstream must receive the same headers, minus hop-by-hop ones.
The default run is small (``HANDOFFMON_FUZZ_EXAMPLES``, default 50: a few seconds);
``python -m tests.benchmarks.fuzz_serve`` runs it long.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handoffmon.proxy.upstream import HOP_BY_HOP
from tests.proxy.conftest import Proxy, proxy_config, running_proxy
from tests.proxy.scripted_upstream import Script, ScriptedUpstream

EXAMPLES = int(os.environ.get("HANDOFFMON_FUZZ_EXAMPLES", "50"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=EXAMPLES <= 50,  # the default CI run is reproducible; the long run explores
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- strategies ------------------------------------------------------------------------------

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 2**40), st.floats(allow_nan=False), st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
    max_leaves=8,
)


def _maybe(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(value, json_values)


tool_call = st.fixed_dictionaries(
    {},
    optional={
        "index": _maybe(st.integers(0, 3)),
        "id": _maybe(st.text(max_size=8)),
        "type": _maybe(st.just("function")),
        "function": _maybe(
            st.fixed_dictionaries(
                {}, optional={"name": _maybe(st.text(max_size=6)), "arguments": _maybe(st.text(max_size=10))}
            )
        ),
    },
)
delta = st.fixed_dictionaries(
    {},
    optional={
        "role": _maybe(st.just("assistant")),
        "content": _maybe(st.text(max_size=20)),
        "tool_calls": _maybe(st.lists(_maybe(tool_call), max_size=3)),
    },
)
choice = st.fixed_dictionaries(
    {},
    optional={
        "index": _maybe(st.integers(0, 2)),
        "delta": _maybe(delta),
        "finish_reason": _maybe(st.just("stop")),
    },
)
chunk = st.fixed_dictionaries(
    {},
    optional={
        "id": _maybe(st.just("chatcmpl-f")),
        "model": _maybe(st.sampled_from(["m-a", "m-b"])),
        "choices": _maybe(st.lists(_maybe(choice), max_size=3)),
        "usage": _maybe(st.fixed_dictionaries({"prompt_tokens": _maybe(st.integers(0, 99))})),
    },
)
raw_event = st.one_of(
    st.builds(lambda t: f"data: {t}\n\n".encode(), st.text(max_size=30)),  # not JSON (or JSON non-objects)
    st.builds(
        lambda t: f": {t}\n\n".encode(),
        st.text(alphabet=st.characters(blacklist_categories=["Cc", "Cs"]), max_size=10),
    ),
    st.binary(max_size=40),  # anything, framing included
    st.just(b"data: [DONE]\n\n"),
)
event = st.one_of(chunk.map(lambda c: f"data: {json.dumps(c)}\n\n".encode()), raw_event)


@st.composite
def streams(draw: st.DrawFn) -> Script:
    """An event stream split at arbitrary byte offsets; maybe [DONE]-less, maybe CRLF, maybe cut off."""
    body = b"".join(draw(st.lists(event, max_size=8)))
    if draw(st.booleans()):
        body += b"data: [DONE]\n\n"
    if draw(st.booleans()):
        body = body.replace(b"\n", b"\r\n")
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=4)))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True) if b > a]
    headers = [(b"content-type", b"text/event-stream"), (b"x-litellm-model-id", b"dep-1")]
    return Script(pieces, headers=headers, cut=draw(st.booleans()) and bool(pieces))


@st.composite
def json_replies(draw: st.DrawFn) -> Script:
    """A non-streamed reply: a chat completion (or any JSON, or bytes), any status, with or without length."""
    status = draw(st.sampled_from([200, 200, 200, 400, 429, 500]))
    doc = draw(
        st.one_of(
            st.fixed_dictionaries(
                {"choices": st.lists(_maybe(st.fixed_dictionaries({"message": _maybe(delta)})), max_size=2)}
            ),
            json_values,
        )
    )
    body = json.dumps(doc).encode() if draw(st.booleans()) else draw(st.binary(max_size=60))
    headers = [(b"content-type", b"application/json")]
    if draw(st.booleans()):
        headers.append((b"content-length", str(len(body)).encode()))
    extra = draw(st.lists(st.tuples(header_names, header_values), max_size=3))
    headers += [(k.encode(), v.encode()) for k, v in extra]
    return Script([body], status=status, headers=headers)


# -- the Responses API (``POST /v1/responses``) ------------------------------------------------

output_item = st.fixed_dictionaries(
    {},
    optional={
        "type": _maybe(st.sampled_from(["message", "function_call", "reasoning", "web_search_call", "x"])),
        "role": _maybe(st.just("assistant")),
        "call_id": _maybe(st.text(max_size=6)),
        "name": _maybe(st.text(max_size=6)),
        "arguments": _maybe(st.text(max_size=10)),
        "content": _maybe(
            st.lists(
                _maybe(
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "type": _maybe(st.just("output_text")),
                            "text": _maybe(st.text(max_size=12)),
                        },
                    )
                ),
                max_size=2,
            )
        ),
    },
)
response_doc = st.fixed_dictionaries(
    {},
    optional={
        "id": _maybe(st.just("resp_f")),
        "model": _maybe(st.sampled_from(["m-a", "m-b"])),
        "status": _maybe(st.sampled_from(["completed", "incomplete", "failed"])),
        "output": _maybe(st.lists(_maybe(output_item), max_size=3)),
        "usage": _maybe(st.fixed_dictionaries({"input_tokens": _maybe(st.integers(0, 99))})),
    },
)
response_event = st.fixed_dictionaries(
    {
        "type": _maybe(
            st.sampled_from(
                [
                    "response.created",
                    "response.output_text.delta",
                    "response.refusal.delta",
                    "response.output_item.added",
                    "response.output_item.done",
                    "response.completed",
                    "response.incomplete",
                    "response.failed",
                ]
            )
        )
    },
    optional={
        "output_index": _maybe(st.integers(0, 3)),
        "content_index": _maybe(st.integers(0, 2)),
        "delta": _maybe(st.text(max_size=10)),
        "item": _maybe(output_item),
        "response": _maybe(response_doc),
    },
)


@st.composite
def typed_event_streams(draw: st.DrawFn, event: st.SearchStrategy[dict[str, Any]]) -> Script:
    """An event stream of typed events (``event:`` lines, odd events, garbage), split anywhere:
    the Responses and Messages APIs' framing."""
    events = draw(
        st.lists(
            st.one_of(
                event.map(lambda e: f"event: {e.get('type')}\ndata: {json.dumps(e)}\n\n".encode()),
                raw_event,
            ),
            max_size=8,
        )
    )
    body = b"".join(events)
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=4)))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True) if b > a]
    return Script(
        pieces, headers=[(b"content-type", b"text/event-stream")], cut=draw(st.booleans()) and bool(pieces)
    )


@st.composite
def api_replies(draw: st.DrawFn, doc: st.SearchStrategy[dict[str, Any]], error_status: int) -> Script:
    """A non-streamed reply of ``doc``'s shape (or any JSON, or bytes), any status."""
    status = draw(st.sampled_from([200, 200, 200, 400, error_status]))
    body = (
        json.dumps(draw(st.one_of(doc, json_values))).encode()
        if draw(st.booleans())
        else draw(st.binary(max_size=60))
    )
    return Script([body], status=status, headers=[(b"content-type", b"application/json")])


responses_bodies = st.one_of(
    st.fixed_dictionaries(
        {"model": st.text(max_size=8)},
        optional={
            "input": _maybe(
                st.one_of(
                    st.text(max_size=12),
                    st.lists(
                        _maybe(
                            st.one_of(
                                output_item,
                                st.fixed_dictionaries(
                                    {"role": _maybe(st.sampled_from(["user", "developer"]))},
                                    optional={"content": _maybe(st.text(max_size=12))},
                                ),
                                st.fixed_dictionaries(
                                    {"type": st.just("function_call_output")},
                                    optional={"call_id": _maybe(st.text(max_size=6)), "output": json_values},
                                ),
                            )
                        ),
                        max_size=4,
                    ),
                )
            ),
            "instructions": _maybe(st.text(max_size=10)),
            "previous_response_id": _maybe(st.just("resp_0")),
            "conversation": _maybe(st.one_of(st.just("conv_0"), st.fixed_dictionaries({"id": json_values}))),
            "stream": st.booleans(),
            "metadata": json_values,
        },
    ).map(lambda d: json.dumps(d).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=80),
)

header_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12).map(
    lambda s: f"x-f-{s}"
)
header_values = st.text(
    alphabet=st.characters(blacklist_categories=["Cc", "Cs", "Zl", "Zp"], blacklist_characters="\x7f"),
    max_size=30,
).map(str.strip)
request_bodies = st.one_of(
    st.fixed_dictionaries(
        {
            "model": st.text(max_size=8),
            "messages": st.lists(
                _maybe(
                    st.fixed_dictionaries(
                        {
                            "role": _maybe(st.sampled_from(["user", "assistant"])),
                            "content": _maybe(st.text(max_size=20)),
                        }
                    )
                ),
                max_size=4,
            ),
        },
        optional={"stream": st.booleans(), "metadata": json_values},
    ).map(lambda d: json.dumps(d).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=80),
)

# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def proxy(scripted: tuple[ScriptedUpstream, str]) -> Iterator[Proxy]:
    with running_proxy(proxy_config(scripted[1])) as p:
        yield p


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as c:
        yield c


# -- the comparison ----------------------------------------------------------------------------

_IGNORED_DOWN = {"date", "server"}
_IGNORED_UP = {"host", "content-length"} | {h.decode() for h in HOP_BY_HOP}


def _call(
    c: httpx.Client,
    url: str,
    body: bytes,
    headers: list[tuple[bytes, bytes]],
    path: str = "/v1/chat/completions",
) -> tuple[Any, ...]:
    """(status, headers, body) of one call, or ("broken", exception type) when the response broke off."""
    try:
        with c.stream("POST", f"{url}{path}", content=body, headers=headers) as r:
            data = b"".join(r.iter_raw())
            kept = sorted(
                (k.lower(), v) for k, v in r.headers.multi_items() if k.lower() not in _IGNORED_DOWN
            )
            return r.status_code, kept, data
    except httpx.TransportError as exc:
        return "broken", type(exc)


def _seen(app: ScriptedUpstream) -> list[tuple[bytes, bytes]]:
    return sorted((k, v) for k, v in app.seen[-1] if k.decode() not in _IGNORED_UP)


def _compare(
    scripted: tuple[ScriptedUpstream, str],
    proxy: Proxy,
    client: httpx.Client,
    script: Script,
    body: bytes,
    headers: list[tuple[str, str]],
    path: str,
) -> None:
    """The same call to ``path`` direct and through ``serve``: the client's view (status,
    headers, bytes, or the same break) and the upstream's view (headers) are equal."""
    app, url = scripted
    sid = app.add(script)
    sent = [(k.encode(), v.encode()) for k, v in [*headers, ("x-script", sid)]]  # UTF-8 bytes on the wire
    direct = _call(client, url, body, sent, path)
    seen_direct = _seen(app)
    proxied = _call(client, proxy.url, body, sent, path)
    seen_proxied = _seen(app)
    del app.scripts[sid]
    assert proxied == direct
    assert seen_proxied == seen_direct


def _healthy(proxy: Proxy) -> None:
    """Only parse failures may be counted: nothing else in handoffmon broke."""
    assert proxy.monitor.flush(10)
    for sample in proxy.registry.collect():
        if sample.name == "handoffmon_monitor_errors":
            for s in sample.samples:
                if s.name.endswith("_total") and s.labels.get("stage") != "parse":
                    assert s.value == 0, s


@FUZZ
@given(
    script=st.one_of(streams(), json_replies()),
    body=request_bodies,
    headers=st.lists(st.tuples(header_names, header_values), max_size=4),
)
def test_generated_traffic_is_identical_through_serve(
    scripted: tuple[ScriptedUpstream, str],
    proxy: Proxy,
    client: httpx.Client,
    script: Script,
    body: bytes,
    headers: list[tuple[str, str]],
) -> None:
    """Any event stream (odd chunks, garbage, split anywhere, CRLF, no [DONE], cut off) or
    non-streamed reply (any status, headers, bytes), with any request body and headers: the
    client's view and the upstream's view equal a direct call."""
    _compare(scripted, proxy, client, script, body, headers, "/v1/chat/completions")


@FUZZ
@given(
    script=st.one_of(typed_event_streams(response_event), api_replies(response_doc, 500)),
    body=responses_bodies,
    headers=st.lists(st.tuples(header_names, header_values), max_size=4),
)
def test_generated_responses_api_traffic_is_identical_through_serve(
    scripted: tuple[ScriptedUpstream, str],
    proxy: Proxy,
    client: httpx.Client,
    script: Script,
    body: bytes,
    headers: list[tuple[str, str]],
) -> None:
    """``POST /v1/responses`` with any body (items of every kind, odd ones, server-side
    state) and any event stream or reply: the client's and the upstream's views equal a
    direct call."""
    _compare(scripted, proxy, client, script, body, headers, "/v1/responses")


# -- the Anthropic Messages API (``POST /v1/messages``) ------------------------------------------

content_block = st.fixed_dictionaries(
    {},
    optional={
        "type": _maybe(st.sampled_from(["text", "tool_use", "tool_result", "thinking", "image", "x"])),
        "text": _maybe(st.text(max_size=12)),
        "id": _maybe(st.text(max_size=6)),
        "name": _maybe(st.text(max_size=6)),
        "input": json_values,
        "tool_use_id": _maybe(st.text(max_size=6)),
        "content": json_values,
    },
)
message_doc = st.fixed_dictionaries(
    {},
    optional={
        "id": _maybe(st.just("msg_f")),
        "model": _maybe(st.sampled_from(["m-a", "m-b"])),
        "content": _maybe(st.lists(_maybe(content_block), max_size=3)),
        "stop_reason": _maybe(st.sampled_from(["end_turn", "tool_use", "max_tokens", "x"])),
        "usage": _maybe(st.fixed_dictionaries({"input_tokens": _maybe(st.integers(0, 99))})),
    },
)
message_event = st.fixed_dictionaries(
    {
        "type": _maybe(
            st.sampled_from(
                [
                    "message_start",
                    "content_block_start",
                    "content_block_delta",
                    "content_block_stop",
                    "message_delta",
                    "message_stop",
                    "error",
                ]
            )
        )
    },
    optional={
        "index": _maybe(st.integers(0, 3)),
        "content_block": _maybe(content_block),
        "delta": _maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "type": _maybe(st.sampled_from(["text_delta", "input_json_delta", "thinking_delta"])),
                    "text": _maybe(st.text(max_size=10)),
                    "partial_json": _maybe(st.text(max_size=10)),
                    "stop_reason": _maybe(st.just("end_turn")),
                },
            )
        ),
        "message": _maybe(message_doc),
    },
)
messages_bodies = st.one_of(
    st.fixed_dictionaries(
        {
            "model": st.text(max_size=8),
            "max_tokens": st.integers(1, 100),
            "messages": st.lists(
                _maybe(
                    st.fixed_dictionaries(
                        {"role": _maybe(st.sampled_from(["user", "assistant"]))},
                        optional={
                            "content": _maybe(
                                st.one_of(st.text(max_size=12), st.lists(_maybe(content_block), max_size=3))
                            )
                        },
                    )
                ),
                max_size=4,
            ),
        },
        optional={"system": json_values, "stream": st.booleans(), "metadata": json_values},
    ).map(lambda d: json.dumps(d).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=80),
)


@FUZZ
@given(
    script=st.one_of(typed_event_streams(message_event), api_replies(message_doc, 529)),
    body=messages_bodies,
    headers=st.lists(st.tuples(header_names, header_values), max_size=4),
)
def test_generated_messages_api_traffic_is_identical_through_serve(
    scripted: tuple[ScriptedUpstream, str],
    proxy: Proxy,
    client: httpx.Client,
    script: Script,
    body: bytes,
    headers: list[tuple[str, str]],
) -> None:
    """``POST /v1/messages`` with any body (blocks of every kind, odd ones) and any event
    stream or reply: the client's and the upstream's views equal a direct call."""
    _compare(scripted, proxy, client, script, body, headers, "/v1/messages")


def test_after_the_fuzz_only_parse_errors_were_counted(proxy: Proxy) -> None:
    """Monitoring stayed on the side: ``monitor_errors`` counts no stage but ``parse``; serve is ready."""
    _healthy(proxy)
    assert httpx.get(f"{proxy.url}/readyz").status_code == 200
