"""``handoffmon serve``: a Responses API answer that finished without a reply is no turn.

A ``POST /v1/responses`` answered ``failed`` (whatever output it kept) or ``incomplete`` with
no text (JSON, or a stream ending ``response.failed`` / ``response.incomplete``) records no
turn and fails no rule: it is counted ``handoffmon_proxy_unmonitored_requests_total{reason=
"no_reply"}`` and ``handoffmon_responses_without_reply_total{status}``. ``incomplete`` with its
text stays a turn. Background calls: ``test_background_responses.py``. Driven by the real
OpenAI SDK (sync and async) against ``tests/proxy/responses_upstream.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from handoffmon.types import NO_REPLY_STATUSES
from tests.conftest import free_port
from tests.proxy.conftest import Proxy, proxy_config, running_proxy
from tests.proxy.mock_upstream import ServerThread, schedule
from tests.proxy.responses_upstream import ResponsesUpstream, responses_text
from tests.proxy.test_responses_api import RULES
from tests.proxy.turn_counts import delta, expected_turns, sample, snapshot

TERMINAL = ("response.completed", "response.failed", "response.incomplete")


@pytest.fixture(scope="module")
def proxy() -> Iterator[Proxy]:
    with ServerThread(ResponsesUpstream(), free_port()) as srv:
        config = proxy_config(srv.url, rules=RULES, pipeline={"check_budget_s": 10.0})
        with running_proxy(config) as p:
            yield p


def _counted(proxy: Proxy) -> dict[str, float]:
    """``no_reply`` and every ``responses_without_reply`` status, as counted so far."""
    got = {
        s: sample(proxy, "handoffmon_responses_without_reply_total", {"status": s}) for s in NO_REPLY_STATUSES
    }
    got["no_reply"] = sample(proxy, "handoffmon_proxy_unmonitored_requests_total", {"reason": "no_reply"})
    return got


async def _ask(proxy: Proxy, mode: str, headers: dict[str, str]) -> Any:
    """One call through ``serve`` in ``mode``; the finished response the application saw."""
    kwargs: Any = {"model": "gpt-x", "input": f"{mode} question", "extra_headers": headers}
    base = f"{proxy.url}/v1"
    if mode.startswith("async"):
        async with openai.AsyncOpenAI(base_url=base, api_key="sk-test", max_retries=0) as aclient:
            if mode == "async":
                return await aclient.responses.create(**kwargs)
            final = None
            async for event in await aclient.responses.create(stream=True, **kwargs):
                final = event.response if event.type in TERMINAL else final
            return final
    with openai.OpenAI(base_url=base, api_key="sk-test", max_retries=0) as client:
        if mode == "sync":
            return client.responses.create(**kwargs)
        final = None
        for event in client.responses.create(stream=True, **kwargs):
            final = event.response if event.type in TERMINAL else final
        return final


MODES = ["sync", "stream", "async", "async_stream"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("status", "output"), [("failed", "kept"), ("failed", "none"), ("incomplete", "none")]
)
def test_an_answer_finished_without_a_reply_is_no_turn_and_counted(
    proxy: Proxy, mode: str, status: str, output: str
) -> None:
    """Changed (was an empty-reply turn failing every rule): no turn, no check; counted once as
    ``unmonitored{reason="no_reply"}`` and ``responses_without_reply{status}``. The answer goes
    out as the upstream sent it."""
    before, counted = snapshot(proxy), _counted(proxy)
    headers = {"x-mock-final-status": status, "x-mock-final-output": output}
    final = asyncio.run(_ask(proxy, mode, headers))
    assert final.status == status and (final.output_text == "") == (output == "none")
    after = snapshot(proxy)
    assert sum(delta(after.turns, before.turns).values()) == 0
    assert sum(delta(after.checks, before.checks).values()) == 0
    assert _counted(proxy) == {k: v + (k in (status, "no_reply")) for k, v in counted.items()}


@pytest.mark.parametrize("mode", MODES)
def test_an_incomplete_answer_with_text_is_a_turn(proxy: Proxy, mode: str) -> None:
    """``incomplete`` at ``max_output_tokens`` with its text: one turn, its rules checked,
    nothing counted without a reply."""
    before, counted = snapshot(proxy), _counted(proxy)
    final = asyncio.run(_ask(proxy, mode, {"x-mock-final-status": "incomplete"}))
    assert final.status == "incomplete" and final.output_text == responses_text(schedule(1), 1)
    after = snapshot(proxy)
    assert delta(after.turns, before.turns) == expected_turns([schedule(1)])
    assert sum(delta(after.checks, before.checks).values()) == len(RULES)
    assert _counted(proxy) == counted
