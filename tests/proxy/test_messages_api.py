"""``handoffmon serve`` monitoring the Anthropic Messages API, driven by the real Anthropic SDK.

The upstream is shaped like Anthropic's own (``tests/proxy/messages_upstream.py``): thinking
blocks, tool use, event streams ending in ``message_stop``, and the author only in the
message's ``model``. The client continues each conversation the way the SDK documents: the
response's ``content`` blocks sent back as the assistant message.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from tests.conftest import free_port
from tests.proxy.conftest import Proxy, proxy_config, running_proxy
from tests.proxy.messages_upstream import TOOL_WORDS, MessagesUpstream, messages_text
from tests.proxy.mock_upstream import ServerThread, schedule
from tests.proxy.test_responses_no_reply import _counted
from tests.proxy.turn_counts import delta, expected_turns, sample, snapshot

TURNS = 6
RULES = [
    {"name": "no_commas", "check": "no_commas"},
    {"name": "says_done", "check": "regex_must_match", "params": {"pattern": "done\\.$"}},
]


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[MessagesUpstream, str]]:
    app = MessagesUpstream()
    with ServerThread(app, free_port()) as srv:
        yield app, srv.url


@pytest.fixture(scope="module")
def proxy(upstream: tuple[MessagesUpstream, str]) -> Iterator[Proxy]:
    with running_proxy(proxy_config(upstream[1], rules=RULES, pipeline={"check_budget_s": 10.0})) as p:
        yield p


def _text(message: Any) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def test_sync_sdk_conversation_attributes_every_reply_it_sent_back(proxy: Proxy) -> None:
    """``messages.create`` (JSON), the SDK's content blocks sent back as they came (thinking
    included): every turn's author, prefix, depth and hand-off counted, no history message
    unknown, both rules checked on every reply, the route counted as ``messages``."""
    before = snapshot(proxy)
    requests_before = sample(
        proxy, "handoffmon_proxy_requests_total", {"route": "messages", "status_class": "2xx"}
    )
    client = anthropic.Anthropic(base_url=proxy.url, api_key="sk-test", max_retries=0)
    messages: list[Any] = []
    for d in range(1, TURNS + 1):
        messages.append({"role": "user", "content": f"sync question {d}"})
        reply = client.messages.create(
            model="claude-x", max_tokens=100, system="Be brief.", messages=messages
        )
        assert _text(reply) == messages_text(schedule(d), d)
        messages.append({"role": "assistant", "content": reply.content})
    client.close()
    after = snapshot(proxy)
    assert delta(after.turns, before.turns) == expected_turns([schedule(d) for d in range(1, TURNS + 1)])
    attributed = delta(after.attributions, before.attributions)
    assert attributed.get("unknown", 0) == 0
    assert sum(attributed.values()) == TURNS * (TURNS - 1) // 2
    verdicts: Counter[tuple[str, str]] = Counter()
    for k, n in delta(after.checks, before.checks).items():
        verdicts[k.rule, k.verdict] += n
    assert verdicts == Counter({("no_commas", "fail"): TURNS, ("says_done", "pass"): TURNS})
    assert (
        sample(proxy, "handoffmon_proxy_requests_total", {"route": "messages", "status_class": "2xx"})
        == requests_before + TURNS
    )


async def test_async_sdk_stream_conversation(proxy: Proxy) -> None:
    """Streamed (``message_stop``, no ``[DONE]``): the reply is folded from the deltas and the
    SDK's own final message sent back attributes to it on the next turn; no event is odd."""
    before = await asyncio.to_thread(snapshot, proxy)
    parse_errors = sample(proxy, "handoffmon_monitor_errors_total", {"stage": "parse"})
    client = anthropic.AsyncAnthropic(base_url=proxy.url, api_key="sk-test", max_retries=0)
    messages: list[Any] = []
    for d in range(1, TURNS + 1):
        messages.append({"role": "user", "content": [{"type": "text", "text": f"stream question {d}"}]})
        async with client.messages.stream(model="claude-x", max_tokens=100, messages=messages) as stream:
            text = "".join([t async for t in stream.text_stream])
            final = await stream.get_final_message()
        assert text == messages_text(schedule(d), d)
        messages.append({"role": "assistant", "content": final.content})  # the SDK's own objects
    await client.close()
    after = await asyncio.to_thread(snapshot, proxy)
    assert delta(after.turns, before.turns) == expected_turns([schedule(d) for d in range(1, TURNS + 1)])
    attributed = delta(after.attributions, before.attributions)
    assert attributed.get("unknown", 0) == 0 and sum(attributed.values()) == TURNS * (TURNS - 1) // 2
    assert sample(proxy, "handoffmon_monitor_errors_total", {"stage": "parse"}) == parse_errors


@pytest.mark.parametrize("stream", [False, True])
def test_tool_use_turns_attribute_and_skip_checks(proxy: Proxy, stream: bool) -> None:
    """A tool call (no text) is a turn whose rules are not applicable; sent back with its
    result, the call is attributed to the model that made it (its streamed ``partial_json``
    and the object sent back compare equal)."""
    before = snapshot(proxy)
    client = anthropic.Anthropic(base_url=proxy.url, api_key="sk-test", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": f"please {TOOL_WORDS} ({stream})"}]

    def ask() -> Any:
        if not stream:
            return client.messages.create(model="claude-x", max_tokens=100, messages=messages)
        with client.messages.stream(model="claude-x", max_tokens=100, messages=messages) as s:
            return s.get_final_message()

    first = ask()
    (call,) = [b for b in first.content if b.type == "tool_use"]
    messages += [
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "42"}]},
    ]
    second = ask()
    assert _text(second) == messages_text(schedule(1), 1)
    messages += [{"role": "assistant", "content": second.content}, {"role": "user", "content": "thanks"}]
    ask()
    client.close()
    after = snapshot(proxy)
    assert sum(delta(after.turns, before.turns).values()) == 3
    attributed = delta(after.attributions, before.attributions)
    assert attributed.get("unknown", 0) == 0 and sum(attributed.values()) == 0 + 1 + 2
    verdicts = Counter[str]()
    for k, n in delta(after.checks, before.checks).items():
        verdicts[k.verdict] += n
    assert verdicts["not_applicable"] == len(RULES)  # the tool-only turn, both rules


def test_bytes_and_errors_pass_through(proxy: Proxy, upstream: tuple[MessagesUpstream, str]) -> None:
    """Bytes pass through unchanged, JSON and event stream, each a recorded turn; an upstream
    error is forwarded and no turn recorded."""
    before = snapshot(proxy)
    headers = {"content-type": "application/json", "x-api-key": "k", "anthropic-version": "2023-06-01"}
    for stream in (False, True):
        raw = json.dumps(
            {
                "model": "claude-x",
                "max_tokens": 10,
                "stream": stream,
                "messages": [{"role": "user", "content": f"bytes {stream}"}],
            }
        ).encode()
        through = httpx.post(f"{proxy.url}/v1/messages", content=raw, headers=headers)
        direct = httpx.post(f"{upstream[1]}/v1/messages", content=raw, headers=headers)
        assert (through.status_code, through.content) == (direct.status_code, direct.content)
    failed = httpx.post(f"{proxy.url}/v1/messages", content=raw, headers={**headers, "x-mock-status": "529"})
    assert failed.status_code == 529 and failed.json()["error"]["type"] == "overloaded_error"
    after = snapshot(proxy)
    assert sum(delta(after.turns, before.turns).values()) == 2


def test_cut_off_stream_records_what_the_client_saw(proxy: Proxy) -> None:
    """A stream that ends without ``message_stop``: the turn is recorded with the text the
    deltas carried, and the next request's copy of that text attributes to it."""
    before = snapshot(proxy)
    url = f"{proxy.url}/v1/messages"
    first = {"role": "user", "content": "cut me off"}
    body = {"model": "claude-x", "max_tokens": 10, "stream": True, "messages": [first]}
    with httpx.Client() as c:
        r = c.post(url, json=body, headers={"x-mock-cut-after": "12"})
        deltas = [
            json.loads(line[5:])["delta"]["text"]
            for line in r.text.splitlines()
            if line.startswith("data:") and '"text_delta"' in line
        ]
        assert deltas and "message_stop" not in r.text
        seen = "".join(deltas)
        follow = {
            "model": "claude-x",
            "max_tokens": 10,
            "messages": [
                first,
                {"role": "assistant", "content": [{"type": "text", "text": seen}]},
                {"role": "user", "content": "go on"},
            ],
        }
        assert c.post(url, json=follow).status_code == 200
    after = snapshot(proxy)
    assert delta(after.turns, before.turns) == expected_turns([schedule(1), schedule(2)])
    assert delta(after.attributions, before.attributions) == Counter({"chain": 1})


# -- an answer without a reply ------------------------------------------------------------
# A Messages API answer that says nothing because the upstream made it so — stopped for
# ``refusal`` or cut at ``max_tokens`` before any text (JSON or stream), or a stream the API
# ended with an ``error`` event before any text (over raw HTTP, so the event reaches serve's
# folder as it reaches the client; an SDK would raise it) — is no turn, no check; counted
# ``unmonitored{reason="no_reply"}`` and ``responses_without_reply{status}`` (``refusal``,
# ``incomplete``, ``error``). A refusal with text, and an ``error`` after some text (a cut-off
# turn), stay turns.


def _post_mock(proxy: Proxy, stream: bool, headers: dict[str, str]) -> str:
    body: dict[str, Any] = {
        "model": "claude-x",
        "max_tokens": 10,
        "stream": stream,
        "messages": [{"role": "user", "content": f"stream {stream}"}],
    }
    r = httpx.post(f"{proxy.url}/v1/messages", json=body, headers=headers, timeout=10)
    assert r.status_code == 200
    return r.text


REFUSED = {"x-mock-stop-reason": "refusal", "x-mock-content": "empty"}
THOUGHT_ONLY = {"x-mock-stop-reason": "max_tokens", "x-mock-content": "thinking"}


@pytest.mark.parametrize(
    ("stream", "headers", "status"),
    [
        (False, REFUSED, "refusal"),
        (True, REFUSED, "refusal"),
        (False, THOUGHT_ONLY, "incomplete"),
        (True, THOUGHT_ONLY, "incomplete"),
        (True, {"x-mock-error-after": "6"}, "error"),  # message_start, ping, the thinking block
    ],
)
def test_an_answer_without_any_text_is_no_turn_and_counted(
    proxy: Proxy, stream: bool, headers: dict[str, str], status: str
) -> None:
    before, counted = snapshot(proxy), _counted(proxy)
    text = _post_mock(proxy, stream, headers)
    assert '"text_delta"' not in text and '"type": "text"' not in text  # the client got no text
    after = snapshot(proxy)
    assert sum(delta(after.turns, before.turns).values()) == 0
    assert sum(delta(after.checks, before.checks).values()) == 0
    assert _counted(proxy) == {k: v + (k in (status, "no_reply")) for k, v in counted.items()}


@pytest.mark.parametrize(
    ("stream", "headers"),
    [
        (False, {"x-mock-stop-reason": "refusal"}),
        (True, {"x-mock-stop-reason": "refusal"}),
        (True, {"x-mock-error-after": "9"}),
    ],
)
def test_a_refusal_with_text_or_an_error_after_text_is_a_turn(
    proxy: Proxy, stream: bool, headers: dict[str, str]
) -> None:
    before, counted = snapshot(proxy), _counted(proxy)
    assert "Message" in _post_mock(proxy, stream, headers)
    after = snapshot(proxy)
    assert delta(after.turns, before.turns) == expected_turns([schedule(1)])
    assert _counted(proxy) == counted
