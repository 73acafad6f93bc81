"""``handoffmon serve`` with routing: the forwarded body's ``fallbacks`` reordered, nothing else touched.

The mock upstream records every body it receives. Turn 1 is written by model-a; turn 2
asks ``g-p`` with fallbacks to ``g-b`` (model-b) then ``g-c`` (model-c). The table says
handing model-a's conversation to model-b costs 15 points and to model-c nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from handoffmon.routing import PairRisk, PairRiskTable
from tests.conftest import free_port
from tests.proxy.conftest import Proxy, Upstream, proxy_config, running_proxy
from tests.proxy.mock_upstream import ServerThread, reply_text
from tests.proxy.responses_upstream import ResponsesUpstream

CANONICAL = {"dep-a-1": "model-a", "dep-b-1": "model-b", "g-b": "model-b", "g-c": "model-c"}
RISKY_B = {("model-a", "model-b"): PairRisk(-0.15, 0.01), ("model-a", "model-c"): PairRisk(0.0, 0.01)}


@pytest.fixture
def serve(upstream: Upstream, request: pytest.FixtureRequest) -> Iterator[Proxy]:
    """serve with routing in the mode the test is parametrized with (enforce by default)."""
    mode = getattr(request, "param", "enforce")
    cfg = proxy_config(
        upstream.url,
        attribution={"canonical_models": CANONICAL},
        routing={"enabled": True, "mode": mode, "return_home": False},
    )
    with running_proxy(cfg) as p:
        yield p


def _history(p: Proxy, tag: str) -> list[dict[str, Any]]:
    """Turn 1 (model-a answers) through serve; the history for turn 2."""
    history = [{"role": "user", "content": f"hello {tag}"}]
    r = httpx.post(f"{p.url}/v1/chat/completions", json={"model": "model-a", "messages": history}, timeout=30)
    assert r.json()["choices"][0]["message"]["content"] == reply_text("model-a", 1)
    return [
        *history,
        {"role": "assistant", "content": reply_text("model-a", 1)},
        {"role": "user", "content": "on"},
    ]


def _forwarded(p: Proxy, upstream: Upstream, body: bytes) -> bytes:
    """Send ``body`` as turn 2; the bytes the upstream received."""
    n = len(upstream.mock.seen)
    r = httpx.post(
        f"{p.url}/v1/chat/completions", content=body, headers={"content-type": "application/json"}, timeout=30
    )
    assert r.status_code == 200
    (seen,) = upstream.mock.seen[n:]
    return seen.body


def _decisions(p: Proxy) -> dict[tuple[str, str], int]:
    return {k: v for k, v in p.runtime.routing.counts.snapshot().items() if v}


def _publish(p: Proxy, age_s: float = 0.0) -> None:
    p.runtime.routing.holder.table = PairRiskTable(RISKY_B, created_at=time.time() - age_s)


def test_the_router_shaped_fallbacks_are_reordered_and_the_rest_kept(
    serve: Proxy, upstream: Upstream
) -> None:
    """{g-p: [g-b, g-c]} → {g-p: [g-c, g-b]}; another group's entry and every other field unchanged."""
    _publish(serve)
    history = _history(serve, "router shape")
    doc = {
        "model": "g-p",
        "messages": history,
        "fallbacks": [{"g-p": ["g-b", "g-c"]}, {"g-b": ["g-c"]}],
        "temperature": 0.2,
        "metadata": {"ünïcode": "kept"},
    }
    sent = json.loads(_forwarded(serve, upstream, json.dumps(doc).encode()))
    assert sent["fallbacks"] == [{"g-p": ["g-c", "g-b"]}, {"g-b": ["g-c"]}]
    assert {k: v for k, v in sent.items() if k != "fallbacks"} == {
        k: v for k, v in doc.items() if k != "fallbacks"
    }
    assert _decisions(serve) == {("enforce", "reordered"): 1}


def test_a_plain_client_side_list_is_reordered(serve: Proxy, upstream: Upstream) -> None:
    _publish(serve)
    history = _history(serve, "plain list")
    body = json.dumps({"model": "g-p", "messages": history, "fallbacks": ["g-b", "g-c"]}).encode()
    assert json.loads(_forwarded(serve, upstream, body))["fallbacks"] == ["g-c", "g-b"]


@pytest.mark.parametrize(
    ("age_s", "fallbacks", "outcome"),
    [
        (None, ["g-b", "g-c"], "no_table"),
        (7200.0, ["g-b", "g-c"], "stale"),
        (0.0, ["g-c", "g-b"], "unchanged"),
        (0.0, ["g-b", "g-unknown"], "unchanged"),  # a group with no known model never moves
    ],
)
def test_bodies_are_forwarded_byte_for_byte_when_the_order_stands(
    serve: Proxy, upstream: Upstream, age_s: float | None, fallbacks: list[str], outcome: str
) -> None:
    """No table, a stale one, or nothing to improve: the exact bytes go upstream, the outcome is counted."""
    if age_s is not None:
        _publish(serve, age_s)
    history = _history(serve, f"kept {outcome} {fallbacks}")
    body = json.dumps({"model": "g-p", "messages": history, "fallbacks": fallbacks}, indent=1).encode()
    assert _forwarded(serve, upstream, body) == body
    assert _decisions(serve) == {("enforce", outcome): 1}


def test_a_body_without_fallbacks_is_not_decided_on(serve: Proxy, upstream: Upstream) -> None:
    """Serve sees no router: without fallbacks in the body there is nothing to reorder, nothing counted."""
    _publish(serve)
    history = _history(serve, "no fallbacks")
    body = json.dumps({"model": "g-p", "messages": history}).encode()
    assert _forwarded(serve, upstream, body) == body
    assert _decisions(serve) == {}


@pytest.mark.parametrize("serve", ["dry_run"], indirect=True)
def test_dry_run_counts_what_it_would_change_and_forwards_unchanged(serve: Proxy, upstream: Upstream) -> None:
    _publish(serve)
    history = _history(serve, "dry run")
    body = json.dumps({"model": "g-p", "messages": history, "fallbacks": ["g-b", "g-c"]}).encode()
    assert _forwarded(serve, upstream, body) == body
    assert _decisions(serve) == {("dry_run", "reordered"): 1}


def test_a_body_that_is_not_json_is_forwarded_and_not_counted_as_a_routing_error(
    serve: Proxy, upstream: Upstream
) -> None:
    """Broken JSON mentioning "fallbacks": the exact bytes go upstream; routing counts nothing."""
    _publish(serve)
    body = b'{"model": "g-p", "fallbacks": ["g-b", '
    n = len(upstream.mock.seen)
    httpx.post(
        f"{serve.url}/v1/chat/completions",
        content=body,
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert upstream.mock.seen[n].body == body
    assert _decisions(serve) == {}


@pytest.fixture
def responses_serve() -> Iterator[tuple[ResponsesUpstream, Proxy]]:
    """serve (routing enforced) in front of a Responses API upstream."""
    app = ResponsesUpstream()
    cfg_routing = {"enabled": True, "mode": "enforce", "return_home": False}
    with ServerThread(app, free_port()) as srv:
        cfg = proxy_config(srv.url, attribution={"canonical_models": CANONICAL}, routing=cfg_routing)
        with running_proxy(cfg) as p:
            yield app, p


@pytest.mark.parametrize("continued", [False, True])
def test_a_responses_calls_fallbacks_are_reordered(
    responses_serve: tuple[ResponsesUpstream, Proxy], continued: bool
) -> None:
    """``POST /v1/responses``: turn 1 by model-a; turn 2 asks g-p with fallbacks, its history sent
    back as output items or kept by the provider (``previous_response_id``, the authors read from
    what serve recorded of turn 1): the fallbacks reach the upstream safer-first, the rest of the
    body as sent."""
    app, p = responses_serve
    _publish(p)
    first = httpx.post(f"{p.url}/v1/responses", json={"model": "g-a", "input": "hello"}, timeout=30).json()
    assert first["model"] == "model-a"
    assert p.monitor.flush(10)
    if continued:
        doc: dict[str, Any] = {"model": "g-p", "input": "on", "previous_response_id": first["id"]}
    else:
        doc = {"model": "g-p", "input": [{"role": "user", "content": "hello"}, *first["output"], "on"]}
        doc["input"][-1] = {"role": "user", "content": "on"}
    doc |= {"fallbacks": ["g-b", "g-c"], "store": True}
    n = len(app.seen)
    r = httpx.post(f"{p.url}/v1/responses", json=doc, timeout=30)
    assert r.status_code == 200
    (seen,) = app.seen[n:]
    sent = json.loads(seen)
    assert sent["fallbacks"] == ["g-c", "g-b"]
    assert {k: v for k, v in sent.items() if k != "fallbacks"} == {
        k: v for k, v in doc.items() if k != "fallbacks"
    }
    assert _decisions(p) == {("enforce", "reordered"): 1}
