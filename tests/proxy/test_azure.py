"""``handoffmon serve`` in front of Azure OpenAI: the paths ``AzureOpenAI`` clients call.

The real OpenAI SDK's ``AzureOpenAI`` client builds Azure's paths: a deployment's chat
completions (``/openai/deployments/<name>/chat/completions?api-version=…``) and the Responses
API (``/openai/responses?api-version=…``); Azure's OpenAI-compatible API is ``/openai/v1/…``.
The loopback upstreams answer those paths (a deployment's only with an ``api-version``, as
Azure), so the tests show each is monitored as its ``/v1`` twin and forwarded as sent: path,
query and the ``api-key`` header.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from handoffmon.integrations.openai_client import OpenAIClientWrapper
from handoffmon.testing import RecordingExporter
from tests.conftest import free_port
from tests.pipeline.helpers import make_config, monitor
from tests.proxy.conftest import Proxy, proxy_config, running_proxy
from tests.proxy.mock_upstream import CANONICAL_MODELS, MockUpstream, ServerThread, reply_text, schedule
from tests.proxy.responses_upstream import ResponsesUpstream, responses_text
from tests.proxy.turn_counts import delta, expected_turns, sample, snapshot

API_VERSION = "2024-10-21"
RULES = [{"name": "no_commas", "check": "no_commas"}]


def _config(url: str) -> Any:
    return proxy_config(url, rules=RULES, attribution={"canonical_models": CANONICAL_MODELS})


@pytest.fixture(scope="module")
def chat() -> Iterator[tuple[MockUpstream, Proxy]]:
    upstream = MockUpstream()
    with ServerThread(upstream, free_port()) as srv, running_proxy(_config(srv.url)) as p:
        yield upstream, p


@pytest.fixture(scope="module")
def responses() -> Iterator[tuple[ResponsesUpstream, Proxy]]:
    upstream = ResponsesUpstream()
    with ServerThread(upstream, free_port()) as srv, running_proxy(_config(srv.url)) as p:
        yield upstream, p


def _azure(proxy: Proxy) -> openai.AzureOpenAI:
    return openai.AzureOpenAI(
        azure_endpoint=proxy.url, api_key="azure-key", api_version=API_VERSION, max_retries=0
    )


def _chat_turns(client: Any, model: str, turns: int, tag: str) -> None:
    """One conversation of ``turns`` calls, every other one streamed, each reply sent back."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"{tag} hello"}]
    for d in range(1, turns + 1):
        if d % 2:
            text = client.chat.completions.create(model=model, messages=messages).choices[0].message.content
        else:
            chunks = client.chat.completions.create(model=model, messages=messages, stream=True)
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == reply_text(schedule(d), d)
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"{tag} {d}"}]


def test_an_azure_deployment_conversation_is_monitored(chat: tuple[MockUpstream, Proxy]) -> None:
    """``AzureOpenAI.chat.completions.create`` through serve: four turns (two streamed) with
    their authors, prefixes and hand-offs, every reply attributed; the upstream saw the
    deployment path, the ``api-version`` and the ``api-key`` the client sent."""
    upstream, proxy = chat
    before = snapshot(proxy)
    routed = sample(
        proxy, "handoffmon_proxy_requests_total", {"route": "chat_completions", "status_class": "2xx"}
    )
    seen = len(upstream.seen)
    with _azure(proxy) as client:
        _chat_turns(client, "my-gpt-deployment", 4, "azure")
    after = snapshot(proxy)
    assert delta(after.turns, before.turns) == expected_turns([schedule(d) for d in range(1, 5)])
    assert delta(after.attributions, before.attributions) == {"chain": 0 + 1 + 2 + 3}
    assert sample(
        proxy, "handoffmon_proxy_requests_total", {"route": "chat_completions", "status_class": "2xx"}
    ) == (routed + 4)
    calls = upstream.seen[seen:]
    assert [c.path for c in calls] == ["/openai/deployments/my-gpt-deployment/chat/completions"] * 4
    assert all(c.query == f"api-version={API_VERSION}" for c in calls)
    assert all(c.headers["api-key"] == "azure-key" for c in calls)


def test_the_azure_v1_api_is_monitored(chat: tuple[MockUpstream, Proxy]) -> None:
    """An OpenAI client on Azure's OpenAI-compatible base URL (``/openai/v1``): monitored turns."""
    upstream, proxy = chat
    before = snapshot(proxy)
    seen = len(upstream.seen)
    with openai.OpenAI(base_url=f"{proxy.url}/openai/v1", api_key="azure-key", max_retries=0) as client:
        _chat_turns(client, "gpt-4o", 3, "v1")
    after = snapshot(proxy)
    assert delta(after.turns, before.turns) == expected_turns([schedule(d) for d in range(1, 4)])
    assert [c.path for c in upstream.seen[seen:]] == ["/openai/v1/chat/completions"] * 3


def test_azure_responses_api_calls_are_monitored(responses: tuple[ResponsesUpstream, Proxy]) -> None:
    """``AzureOpenAI.responses.create`` (``/openai/responses?api-version=…``) chained by
    ``previous_response_id``: three turns, each earlier reply attributed from the stored chain."""
    _upstream, proxy = responses
    before = snapshot(proxy)
    with _azure(proxy) as client:
        previous: str | None = None
        for d in (1, 2, 3):
            extra: dict[str, Any] = {"previous_response_id": previous} if previous else {}
            resp = client.responses.create(model="my-deployment", input=f"azure responses {d}", **extra)
            assert resp.output_text == responses_text(schedule(d), d)
            previous = resp.id
    after = snapshot(proxy)
    assert delta(after.turns, before.turns) == expected_turns([schedule(d) for d in (1, 2, 3)])
    assert delta(after.attributions, before.attributions) == {"response_id": 0 + 1 + 2}


def test_other_azure_paths_pass_through_and_the_rest_is_refused(chat: tuple[MockUpstream, Proxy]) -> None:
    """Any other ``/openai/…`` request is forwarded unmonitored (the upstream's own answer comes
    back); a deployment call without ``api-version`` gets the upstream's 404, as from Azure; a
    path outside ``/v1`` and ``/openai`` is serve's own 404, never forwarded."""
    upstream, proxy = chat
    seen = len(upstream.seen)
    got = httpx.get(f"{proxy.url}/openai/deployments?api-version={API_VERSION}")
    assert got.status_code == 404 and got.headers["x-upstream"] == "404"  # forwarded
    missing = httpx.post(
        f"{proxy.url}/openai/deployments/d/chat/completions",
        json={"messages": [{"role": "user", "content": "x"}]},
    )
    assert missing.status_code == 404 and missing.json()["error"]["message"] == "Resource not found"
    assert [(c.path, c.query) for c in upstream.seen[seen:]] == [
        ("/openai/deployments", f"api-version={API_VERSION}"),
        ("/openai/deployments/d/chat/completions", ""),
    ]
    refused = httpx.post(f"{proxy.url}/azure/openai/chat/completions", json={})
    assert refused.status_code == 404 and "/openai/*" in refused.json()["error"]["message"]
    assert len(upstream.seen) == seen + 2


def test_a_wrapped_azure_client_is_monitored_directly(chat: tuple[MockUpstream, Proxy]) -> None:
    """``wrap(AzureOpenAI(...))`` calling the Azure-shaped upstream itself, without serve: the
    same turns, and the wrapper passes for an ``AzureOpenAI``."""
    upstream, proxy = chat
    exp = RecordingExporter()
    with monitor(
        make_config(rules=RULES, attribution={"canonical_models": CANONICAL_MODELS}), exporters=[exp]
    ) as m:
        azure = openai.AzureOpenAI(
            azure_endpoint=str(proxy.config.proxy.upstream),
            api_key="k",
            api_version=API_VERSION,
            max_retries=0,
        )
        client = OpenAIClientWrapper(azure, m)
        assert isinstance(client, openai.AzureOpenAI)
        _chat_turns(client, "wrapped-deployment", 3, "wrapped")
        assert m.flush(10)
    assert [r.context.depth for r in exp.results] == [1, 2, 3]
    assert [r.record.author for r in exp.results] == [schedule(d) for d in (1, 2, 3)]
    assert [len(r.context.attributions) for r in exp.results] == [0, 1, 2]
    assert all(a.method == "chain" for r in exp.results for a in r.context.attributions)
    assert upstream.seen[-1].path == "/openai/deployments/wrapped-deployment/chat/completions"
