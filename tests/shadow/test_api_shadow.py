"""Shadow continuation of Responses API and Messages API turns: the history, read as chat, is
continued through chat completions of the same router, client or upstream; a history the request
does not hold (a stored one) or cannot carry as chat is skipped with its reason, never sent.

Real ``litellm.Router`` deployments call loopback upstreams over HTTP: an OpenAI-shaped one
answering both ``/v1/responses`` and ``/v1/chat/completions`` (``Both``), and an Anthropic-shaped
one, which LiteLLM also calls for the shadow's chat completion (it translates it to ``/v1/messages``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytest.importorskip("litellm")

import openai

from handoffmon.counts import ShadowKey
from handoffmon.integrations import wrap
from handoffmon.shadow.turns import unsent_history
from tests.conftest import free_port
from tests.integrations.routers import CANONICAL, responses_router
from tests.proxy.conftest import proxy_config, running_proxy
from tests.proxy.messages_upstream import MessagesUpstream
from tests.proxy.mock_upstream import MockUpstream, ServerThread
from tests.proxy.responses_upstream import RESPONSES_PATHS, ResponsesUpstream
from tests.shadow.helpers import shadow_runtime

RULES = [{"name": "short", "check": "length", "params": {"unit": "words", "max": 500}}]
"""Every reply of the mock upstreams passes: a recorded pair lands in ``both_pass``."""

IMAGE = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}


class Both:
    """``/v1/responses`` answered by a ``ResponsesUpstream``, everything else by a ``MockUpstream``
    (chat completions); ``paths`` lists the path of every request, in order."""

    def __init__(self) -> None:
        self.responses, self.chat = ResponsesUpstream(), MockUpstream()
        self.paths: list[str] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.paths.append(scope["path"])
        app = self.responses if scope.get("path") in RESPONSES_PATHS else self.chat
        await app(scope, receive, send)


@pytest.fixture(scope="module")
def both() -> Iterator[tuple[Both, str]]:
    app = Both()
    with ServerThread(app, free_port()) as srv:
        yield app, srv.url


def _runtime(canonical: dict[str, str], target: str, candidates: dict[str, list[str]]) -> Any:
    return shadow_runtime(RULES, target, candidates, canonical)


def _skipped(rt: Any, reason: str) -> float:
    return rt.registry.get_sample_value("handoffmon_shadow_skipped_total", {"reason": reason}) or 0.0


def _calls(rt: Any) -> float:
    return (
        rt.registry.get_sample_value("handoffmon_shadow_calls_total", {"arm": "no_handoff", "outcome": "ok"})
        or 0.0
    )


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_router_responses_turns_are_shadowed_through_chat_completions(
    both: tuple[Both, str], stream: bool
) -> None:
    """Two ``aresponses`` turns on alpha (model-c): the second is continued by the candidate
    model-b through the Router's chat completions (backup's deployment), and the pair is counted.
    Then a ``previous_response_id`` continuation and a history holding an image: skipped with
    their reasons, no call made; the shadow calls are never turns."""
    app, url = both
    with _runtime(CANONICAL, "model-b", {"model-c": ["model-b"]}) as rt:
        wrapped = wrap(responses_router(f"{url}/v1"), runtime=rt)

        async def ask(**kwargs: Any) -> Any:
            if not stream:
                return await wrapped.aresponses(model="alpha", **kwargs)
            events = [e async for e in await wrapped.aresponses(model="alpha", stream=True, **kwargs)]
            (done,) = [e for e in events if e.type == "response.completed"]
            return done.response

        since = len(app.paths)
        items: list[Any] = [{"role": "user", "content": "first question"}]
        for i in range(2):
            reply = await ask(input=items)
            items += [
                *(o.model_dump(exclude_none=True) for o in reply.output),
                {"role": "user", "content": f"q{i}"},
            ]
            assert rt.flush(20)
        assert app.paths[since:] == ["/v1/responses", "/v1/responses", "/v1/chat/completions"]
        chat = json.loads(app.chat.seen[-1].body)
        assert chat["model"] == "gpt-b" and chat["messages"][-1] == {"role": "user", "content": "q0"}
        await ask(input=[{"role": "user", "content": "go on"}], previous_response_id=reply.id)
        assert rt.flush(20)
        image = [*items[:-1], {"role": "user", "content": [{"type": "input_text", "text": "this?"}, IMAGE]}]
        await ask(input=image)
        assert rt.flush(20)
        counts = rt.snapshot()
        assert app.paths[since + 3 :] == ["/v1/responses", "/v1/responses"]  # no shadow call for either
        assert (_skipped(rt, "history_stored"), _skipped(rt, "history_not_chat"), _calls(rt)) == (1, 1, 1)
    assert counts.shadow[ShadowKey("short", "model-c", "model-b", "both_pass")] == 1
    assert sum(counts.turns.values()) == 4


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_router_messages_turns_are_shadowed_through_chat_completions(stream: bool) -> None:
    """Two ``aanthropic_messages`` turns on claude-a: claude-b continues the second through the
    Router's chat completions, which LiteLLM sends to its Anthropic deployment as a Messages call
    (so the upstream sees three ``/v1/messages`` requests, the third the history read as chat)."""
    import litellm

    upstream = MessagesUpstream()
    with ServerThread(upstream, free_port()) as srv:
        router = litellm.Router(
            model_list=[
                {
                    "model_name": group,
                    "litellm_params": {"model": "anthropic/claude-x", "api_key": "k", "api_base": srv.url},
                    "model_info": {"id": dep},
                }
                for group, dep in (("claude-a", "dep-ca"), ("claude-b", "dep-cb"))
            ],
            num_retries=0,
        )
        canonical = {"dep-ca": "claude-a", "dep-cb": "claude-b"}
        with _runtime(canonical, "claude-b", {"claude-a": ["claude-b"]}) as rt:
            wrapped = wrap(router, runtime=rt)
            messages: list[dict[str, Any]] = [{"role": "user", "content": "first question"}]
            for i in range(2):
                reply = await wrapped.aanthropic_messages(
                    model="claude-a", messages=messages, max_tokens=100, system="be brief", stream=stream
                )
                if stream:
                    raw = b"".join([chunk async for chunk in reply])
                    text = "".join(
                        json.loads(line[6:])["delta"]["text"]
                        for line in raw.decode().splitlines()
                        if line.startswith("data: ") and '"text_delta"' in line
                    )
                else:
                    text = next(b["text"] for b in reply["content"] if b["type"] == "text")
                messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"q{i}"}]
                assert rt.flush(20)
            counts = rt.snapshot()
            assert _calls(rt) == 1
    shadow = json.loads(upstream.seen[2])
    assert len(upstream.seen) == 3
    assert shadow["system"] in ("be brief", [{"type": "text", "text": "be brief"}])
    assert [m["role"] for m in shadow["messages"]] == ["user", "assistant", "user"]
    assert counts.shadow[ShadowKey("short", "claude-a", "claude-b", "both_pass")] == 1
    assert sum(counts.turns.values()) == 2


@pytest.mark.parametrize("is_async", [False, True], ids=["OpenAI", "AsyncOpenAI"])
async def test_a_wrapped_openai_clients_responses_turns_are_shadowed(
    both: tuple[Both, str], is_async: bool
) -> None:
    """``client.responses.create`` twice (model-a answers both, by the upstream's schedule):
    model-b continues the second through the same client's chat completions (with the shadow
    header; an async client's call runs on the application's loop), and the pair is counted."""
    import asyncio
    import inspect

    app, url = both
    canonical = {"dep-a-1": "model-a", "dep-b-1": "model-b"}
    with _runtime(canonical, "model-b", {"model-a": ["model-b"]}) as rt:
        kind = openai.AsyncOpenAI if is_async else openai.OpenAI
        wrapped = wrap(kind(api_key="k", base_url=f"{url}/v1", max_retries=0), runtime=rt)
        since = len(app.paths)
        items: list[Any] = [{"role": "user", "content": "hello"}]
        for i in range(2):
            reply = wrapped.responses.create(model="model-a", input=items, instructions="be brief")
            reply = await reply if inspect.isawaitable(reply) else reply
            items += [
                *(o.model_dump(exclude_none=True) for o in reply.output),
                {"role": "user", "content": f"{i}"},
            ]
            assert await asyncio.to_thread(rt.flush, 20)  # the loop stays free for an async shadow call
        counts = rt.snapshot()
    assert app.paths[since:] == ["/v1/responses", "/v1/responses", "/v1/chat/completions"]
    seen = app.chat.seen[-1]
    body = json.loads(seen.body)
    assert seen.headers["x-handoffmon-shadow"] == "1"
    assert body["model"] == "model-b" and body["messages"][0] == {"role": "system", "content": "be brief"}
    assert counts.shadow[ShadowKey("short", "model-a", "model-b", "both_pass")] == 1
    assert sum(counts.turns.values()) == 2


def test_serve_shadows_responses_turns_through_the_upstreams_chat_completions(both: tuple[Both, str]) -> None:
    """``serve``'s ``/v1/responses``: the second turn (model-a again, by the upstream's schedule)
    is continued by model-b through the upstream's ``/v1/chat/completions``; the client's bytes
    are unchanged; a stored-history continuation is skipped as ``history_stored``."""
    app, url = both
    cfg = proxy_config(
        url,
        rules=RULES,
        attribution={"canonical_models": {"dep-a-1": "model-a", "dep-b-1": "model-b"}},
        shadow={
            "enabled": True,
            "sample_rate": 1.0,
            "usd_per_day": None,
            "targets": ["model-b"],
            "candidates": {"model-a": ["model-b"]},
        },
    )
    with running_proxy(cfg) as proxy, httpx.Client(base_url=proxy.url, timeout=30) as http:
        since = len(app.paths)
        items: list[Any] = [{"role": "user", "content": "serve me"}]
        for i in range(2):
            r = http.post("/v1/responses", json={"model": "auto", "input": items})
            assert r.status_code == 200, r.text
            items += [*r.json()["output"], {"role": "user", "content": f"{i}"}]
            assert proxy.runtime.flush(20)
        r = http.post(
            "/v1/responses", json={"model": "auto", "input": "more", "previous_response_id": r.json()["id"]}
        )
        assert r.status_code == 200, r.text
        assert proxy.runtime.flush(20)
        counts = proxy.runtime.snapshot()
        stored = _skipped(proxy.runtime, "history_stored")
    assert app.paths[since:] == ["/v1/responses", "/v1/responses", "/v1/chat/completions", "/v1/responses"]
    assert json.loads(app.chat.seen[-1].body)["model"] == "model-b"
    assert counts.shadow[ShadowKey("short", "model-a", "model-b", "both_pass")] == 1
    assert stored == 1 and sum(counts.turns.values()) == 3


@pytest.mark.parametrize(
    ("messages", "stored", "reason"),
    [
        ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}], False, None),
        ([{"role": "user", "content": [{"type": "text", "text": "hi"}]}], False, None),
        ([{"role": "user", "content": "hi"}], True, "history_stored"),
        ([{"role": "user", "content": [{"type": "text", "text": "hi"}, IMAGE]}], False, "history_not_chat"),
        ([{"role": "user", "content": [{"type": "image", "source": {}}]}], False, "history_not_chat"),
        ([{"role": "critic", "content": "hi"}], False, "history_not_chat"),
        (["hi"], False, "history_not_chat"),
        (
            [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        _call := {
                            "id": "c",
                            "type": "function",
                            "function": {"name": "lookup", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c", "content": "1"},
            ],
            False,
            None,
        ),
        (
            [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{**_call, "function": {"name": "web_search_call", "arguments": ""}}],
                }
            ],
            False,
            "history_not_chat",
        ),
        ([{"role": "assistant", "content": None, "tool_calls": ["x"]}], False, "history_not_chat"),
    ],
)
def test_unsent_history_reasons(messages: list[Any], stored: bool, reason: str | None) -> None:
    """Text and function calls go as they are; a stored history, parts chat cannot carry as read,
    roles chat does not know and built-in tool calls are reasons not to send."""
    assert unsent_history(messages, stored) == reason
