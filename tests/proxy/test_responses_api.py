"""``handoffmon serve`` monitoring the OpenAI Responses API, driven by the real OpenAI SDK.

The upstream is shaped like OpenAI's own (``tests/proxy/responses_upstream.py``): reasoning
items, function calls, event streams without ``[DONE]``, and the author only in the response's
``model``. The client continues each conversation the way the SDK documents: sending the
previous ``output`` items back in ``input``, or naming the response it continues
(``previous_response_id``).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import free_port
from tests.proxy.conftest import Proxy, proxy_config, running_proxy
from tests.proxy.mock_upstream import ServerThread, schedule
from tests.proxy.responses_upstream import TOOL_WORDS, ResponsesUpstream, responses_text
from tests.proxy.turn_counts import delta, expected_turns, sample, snapshot

TURNS = 7
RULES = [
    {"name": "no_commas", "check": "no_commas"},
    {"name": "says_done", "check": "regex_must_match", "params": {"pattern": "done\\.$"}},
]


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[ResponsesUpstream, str]]:
    app = ResponsesUpstream()
    with ServerThread(app, free_port()) as srv:
        yield app, srv.url


@pytest.fixture(scope="module")
def proxy(upstream: tuple[ResponsesUpstream, str]) -> Iterator[Proxy]:
    with running_proxy(proxy_config(upstream[1], rules=RULES, pipeline={"check_budget_s": 10.0})) as p:
        yield p


def test_sync_sdk_conversation_attributes_every_output_it_sent_back(proxy: Proxy) -> None:
    """``client.responses.create`` (JSON), output items echoed back as dicts: every turn's
    author (from ``model``), prefix, depth and hand-off counted, no history message unknown,
    and both rules checked on every reply."""
    before = snapshot(proxy)
    requests_before = sample(
        proxy, "handoffmon_proxy_requests_total", {"route": "responses", "status_class": "2xx"}
    )
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk-test", max_retries=0)
    items: list[Any] = []
    for d in range(1, TURNS + 1):
        items.append({"role": "user", "content": f"sync question {d}"})
        resp = client.responses.create(model="gpt-x", instructions="Answer briefly.", input=items)
        assert resp.output_text == responses_text(schedule(d), d)
        items += [o.model_dump(exclude_none=True) for o in resp.output]
    client.close()
    after = snapshot(proxy)
    assert delta(after.turns, before.turns) == expected_turns([schedule(d) for d in range(1, TURNS + 1)])
    attributed = delta(after.attributions, before.attributions)
    assert attributed.get("unknown", 0) == 0
    assert sum(attributed.values()) == TURNS * (TURNS - 1) // 2
    checks = delta(after.checks, before.checks)
    verdicts: Counter[tuple[str, str]] = Counter()
    for k, n in checks.items():
        verdicts[k.rule, k.verdict] += n
    # the mock's text has commas and ends with "done.": the same verdict on every turn
    assert verdicts == Counter({("no_commas", "fail"): TURNS, ("says_done", "pass"): TURNS})
    assert (
        sample(proxy, "handoffmon_proxy_requests_total", {"route": "responses", "status_class": "2xx"})
        == requests_before + TURNS
    )


async def test_async_sdk_stream_conversation(proxy: Proxy) -> None:
    """Streamed (events, no ``[DONE]``): the reply is read from ``response.completed`` and the
    SDK's own output objects sent back attribute to it on the next turn."""
    before = await asyncio.to_thread(snapshot, proxy)
    parse_errors = sample(proxy, "handoffmon_monitor_errors_total", {"stage": "parse"})
    client = openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key="sk-test", max_retries=0)
    items: list[Any] = []
    for d in range(1, TURNS + 1):
        items.append({"role": "user", "content": [{"type": "input_text", "text": f"stream question {d}"}]})
        stream = await client.responses.create(model="gpt-x", input=items, stream=True)
        deltas, final = [], None
        async for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
            elif event.type == "response.completed":
                final = event.response
        assert final is not None and "".join(deltas) == responses_text(schedule(d), d)
        items += list(final.output)  # the SDK's own objects
    await client.close()
    after = await asyncio.to_thread(snapshot, proxy)
    assert delta(after.turns, before.turns) == expected_turns([schedule(d) for d in range(1, TURNS + 1)])
    attributed = delta(after.attributions, before.attributions)
    assert attributed.get("unknown", 0) == 0 and sum(attributed.values()) == TURNS * (TURNS - 1) // 2
    # the event types the folder does not need (content_part.*, output_text.done, ...) are not odd
    assert sample(proxy, "handoffmon_monitor_errors_total", {"stage": "parse"}) == parse_errors


@pytest.mark.parametrize("stream", [False, True])
def test_tool_call_turns_attribute_and_skip_checks(proxy: Proxy, stream: bool) -> None:
    """A function call (no text) is a turn whose rules are not applicable; sent back with its
    output, the call is attributed to the model that made it, like any assistant message."""
    before = snapshot(proxy)
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk-test", max_retries=0)
    items: list[Any] = [{"role": "user", "content": f"please {TOOL_WORDS} (stream={stream})"}]
    authors: list[str] = []

    def ask() -> Any:
        if not stream:
            return client.responses.create(model="gpt-x", input=items)
        with client.responses.stream(model="gpt-x", input=items) as events:
            for _ in events:
                pass
            return events.get_final_response()

    resp = ask()
    call = next(o for o in resp.output if o.type == "function_call")
    assert resp.output_text == ""
    authors.append(resp.model)
    items += [o.model_dump(exclude_none=True) for o in resp.output]
    items.append({"type": "function_call_output", "call_id": call.call_id, "output": json.dumps({"hits": 3})})
    resp = ask()
    assert resp.output_text == responses_text(schedule(1), 1)
    authors.append(resp.model)
    items += [o.model_dump(exclude_none=True) for o in resp.output]
    items.append({"role": "user", "content": "thanks"})
    authors.append(ask().model)
    client.close()
    after = snapshot(proxy)
    assert delta(after.turns, before.turns) == expected_turns(authors)
    attributed = delta(after.attributions, before.attributions)
    assert attributed.get("unknown", 0) == 0 and sum(attributed.values()) == 0 + 1 + 2
    verdicts: Counter[str] = Counter()
    for k, n in delta(after.checks, before.checks).items():
        verdicts[k.verdict] += n
    assert verdicts["not_applicable"] == len(RULES)  # the tool-only turn, both rules
    assert verdicts["not_applicable"] + verdicts["pass"] + verdicts["fail"] == 3 * len(RULES)


def test_chained_calls_are_turns_at_their_true_depth(proxy: Proxy) -> None:
    """Calls chained by ``previous_response_id`` (the history kept by the provider), JSON and
    streamed: forwarded unchanged, each a turn at its depth with its prefix and hand-off, the
    hidden history attributed from the response it continues (ADR 0011)."""
    before, skipped = (
        snapshot(proxy),
        sample(proxy, "handoffmon_proxy_unmonitored_requests_total", {"reason": "server_state"}),
    )
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk-test", max_retries=0)
    previous = client.responses.create(model="gpt-x", input="stateful opener").id
    for depth in (2, 3, 4):
        if depth == 4:
            with client.responses.stream(
                model="gpt-x", input=f"then {depth}", previous_response_id=previous
            ) as s:
                for _ in s:
                    pass
                reply = s.get_final_response()
        else:
            reply = client.responses.create(
                model="gpt-x", input=f"then {depth}", previous_response_id=previous
            )
        assert reply.output_text == responses_text(schedule(depth), depth)
        previous = reply.id
    client.close()
    after = snapshot(proxy)
    assert delta(after.turns, before.turns) == expected_turns([schedule(d) for d in (1, 2, 3, 4)])
    assert delta(after.attributions, before.attributions) == Counter({"response_id": 1 + 2 + 3})
    assert sample(proxy, "handoffmon_proxy_unmonitored_requests_total", {"reason": "server_state"}) == skipped


def test_conversation_objects_are_turns(proxy: Proxy) -> None:
    """Calls continuing a ``conversation`` object (``{"id"}`` or a string): turns at their depth
    under the conversation's id, the hidden history from its head."""
    before = snapshot(proxy)
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk-test", max_retries=0)
    for depth in (1, 2, 3, 4):
        conversation: Any = {"id": "conv_serve"} if depth % 2 else "conv_serve"
        reply = client.responses.create(model="gpt-x", input=f"conv {depth}", conversation=conversation)
        assert reply.output_text == responses_text(schedule(depth), depth)
    client.close()
    after = snapshot(proxy)
    assert delta(after.turns, before.turns) == expected_turns([schedule(d) for d in (1, 2, 3, 4)])
    assert delta(after.attributions, before.attributions) == Counter({"response_id": 1 + 2 + 3})


def test_a_background_calls_queued_answer_is_forwarded_and_parked(proxy: Proxy) -> None:
    """``background=True``: the first answer is ``queued`` with no output, its reply comes
    later; forwarded unchanged, no turn (an empty reply would fail every rule against a model
    that has not answered yet) and nothing counted while the call waits for a poll
    (``tests/proxy/test_background_responses.py``); deleted unpolled, it is counted
    ``unfinished``, not as an unreadable reply."""
    before = snapshot(proxy)
    reasons = ("unfinished", "bad_reply")
    name = "handoffmon_proxy_unmonitored_requests_total"
    counted = {r: sample(proxy, name, {"reason": r}) for r in reasons}
    body = {"model": "gpt-x", "input": "later please", "background": True}
    r = httpx.post(f"{proxy.url}/v1/responses", json=body)
    assert r.status_code == 200 and r.json()["status"] == "queued"
    assert proxy.monitor.flush(10)
    assert {r: sample(proxy, name, {"reason": r}) for r in reasons} == counted
    assert httpx.delete(f"{proxy.url}/v1/responses/{r.json()['id']}").status_code == 200
    after = snapshot(proxy)
    assert sum(delta(after.turns, before.turns).values()) == 0
    now = {r: sample(proxy, name, {"reason": r}) for r in reasons}
    assert now == {"unfinished": counted["unfinished"] + 1, "bad_reply": counted["bad_reply"]}


def test_unknown_stored_histories_are_forwarded_and_counted_unmonitored(
    proxy: Proxy, upstream: tuple[ResponsesUpstream, str]
) -> None:
    """A call naming both a previous response and a conversation, or a conversation without an
    id: forwarded unchanged, no turn, counted as ``server_state``."""
    before, skipped = (
        snapshot(proxy),
        sample(proxy, "handoffmon_proxy_unmonitored_requests_total", {"reason": "server_state"}),
    )
    bodies = [
        {"model": "gpt-x", "input": "a", "conversation": "conv_x", "previous_response_id": "resp_x"},
        {"model": "gpt-x", "input": "b", "conversation": {"name": "no id"}},
    ]
    for body in bodies:
        raw = json.dumps(body).encode()
        through = httpx.post(
            f"{proxy.url}/v1/responses", content=raw, headers={"content-type": "application/json"}
        )
        direct = httpx.post(
            f"{upstream[1]}/v1/responses", content=raw, headers={"content-type": "application/json"}
        )
        assert (through.status_code, through.content) == (direct.status_code, direct.content)
    after = snapshot(proxy)
    assert sum(delta(after.turns, before.turns).values()) == 0
    assert sample(
        proxy, "handoffmon_proxy_unmonitored_requests_total", {"reason": "server_state"}
    ) == skipped + len(bodies)


@pytest.mark.parametrize("stream", [False, True])
def test_bytes_pass_through_unchanged(
    proxy: Proxy, upstream: tuple[ResponsesUpstream, str], stream: bool
) -> None:
    """Direct and through ``serve``: same status and body bytes, JSON and event stream."""
    raw = json.dumps({"model": "gpt-x", "input": f"byte identity {stream}", "stream": stream}).encode()
    headers = {"content-type": "application/json", "authorization": "Bearer sk-secret"}
    with httpx.Client() as c:
        direct = c.post(f"{upstream[1]}/v1/responses", content=raw, headers=headers)
        proxied = c.post(f"{proxy.url}/v1/responses", content=raw, headers=headers)
    assert proxied.status_code == direct.status_code == 200
    assert proxied.content == direct.content
    assert upstream[0].seen[-1] == raw


def test_cut_off_stream_records_what_the_client_saw(proxy: Proxy) -> None:
    """A stream that ends without its terminal event: the turn is recorded with the text the
    deltas carried, and the next request's copy of that text attributes to it."""
    before = snapshot(proxy)
    url = f"{proxy.url}/v1/responses"
    body = {"model": "gpt-x", "input": [{"role": "user", "content": "cut me off"}], "stream": True}
    with httpx.Client() as c:
        r = c.post(url, json=body, headers={"x-mock-cut-after": "12"})
        deltas = [
            json.loads(line[5:])["delta"]
            for line in r.text.splitlines()
            if line.startswith("data:") and '"response.output_text.delta"' in line
        ]
        assert deltas and "response.completed" not in r.text
        seen = "".join(deltas)
        follow = {
            "model": "gpt-x",
            "input": [
                *body["input"],
                {"role": "assistant", "content": [{"type": "output_text", "text": seen}]},
                {"role": "user", "content": "go on"},
            ],
        }
        assert c.post(url, json=follow).status_code == 200
    after = snapshot(proxy)
    assert delta(after.turns, before.turns) == expected_turns([schedule(1), schedule(2)])
    assert delta(after.attributions, before.attributions).get("unknown", 0) == 0


@pytest.mark.parametrize("cut", ["4", "12"], ids=["no_text", "some_text"])
def test_a_stream_cut_before_its_terminal_event_is_a_turn_no_rule_judges(proxy: Proxy, cut: str) -> None:
    """The body ends cleanly after ``cut`` events (the reasoning item only, or some text too),
    without ``response.completed``: a cut-off turn, every rule ``not_applicable`` (reason
    ``incomplete``), as the Messages API's without ``message_stop``. It was a completed turn,
    judged: an empty reply fails every rule, a partial one is judged as if whole."""
    before = snapshot(proxy)
    body = {"model": "gpt-x", "input": f"cut after {cut}", "stream": True}
    r = httpx.post(f"{proxy.url}/v1/responses", json=body, headers={"x-mock-cut-after": cut})
    assert r.status_code == 200 and r.text.count("data:") == int(cut)
    assert ('"response.output_text.delta"' in r.text) == (cut == "12")
    assert "response.completed" not in r.text
    after = snapshot(proxy)
    assert delta(after.turns, before.turns) == expected_turns([schedule(1)])
    verdicts = Counter((k.rule, k.verdict) for k in delta(after.checks, before.checks).elements())
    assert verdicts == Counter({(rule["name"], "not_applicable"): 1 for rule in RULES})
