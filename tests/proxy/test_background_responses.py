"""``handoffmon serve`` recording background Responses API calls, driven by the real OpenAI SDK.

``client.responses.create(background=True)`` answers ``queued``; ``serve`` parks the call
(``proxy.background``) and the first ``client.responses.retrieve(id)`` that returns it finished
records the turn, once, with its author and depth; ``cancel`` / ``delete`` forget it. The
upstream is ``tests/proxy/responses_upstream.py`` (``x-mock-polls``: ``in_progress`` answers
before the finished one).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from handoffmon.proxy.forward import Forwarder
from handoffmon.runtime import background as bg
from handoffmon.testing import RecordingExporter
from handoffmon.types import NO_REPLY_STATUSES
from tests.conftest import free_port
from tests.proxy.conftest import Proxy, proxy_config, running_proxy
from tests.proxy.mock_upstream import ServerThread, schedule
from tests.proxy.responses_upstream import ResponsesUpstream, responses_text
from tests.proxy.test_responses_api import RULES
from tests.proxy.turn_counts import delta, expected_turns, sample, snapshot

UNMONITORED = "handoffmon_proxy_unmonitored_requests_total"
REASONS = ("unfinished", "no_reply", "bad_reply", "too_large", "upstream_status", "bad_json", "no_messages")
WITHOUT_REPLY = "handoffmon_responses_without_reply_total"


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, Proxy]]:
    """The Responses upstream's URL, and a proxy in front of it (both for this module)."""
    with ServerThread(ResponsesUpstream(), free_port()) as srv:
        config = proxy_config(srv.url, rules=RULES, pipeline={"check_budget_s": 10.0})
        with running_proxy(config) as p:
            yield srv.url, p


@pytest.fixture
def proxy(served: tuple[str, Proxy]) -> Proxy:
    return served[1]


def _client(proxy: Proxy, prefix: str = "/v1") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy.url}{prefix}", api_key="sk-test", max_retries=0)


def _unmonitored(proxy: Proxy) -> dict[str, float]:
    return {r: sample(proxy, UNMONITORED, {"reason": r}) for r in REASONS}


def _without_reply(proxy: Proxy) -> dict[str, float]:
    return {s: sample(proxy, WITHOUT_REPLY, {"status": s}) for s in NO_REPLY_STATUSES}


def _grew(proxy: Proxy, before: dict[str, float], **by: int) -> None:
    """The unmonitored counts moved by exactly ``by`` (every other reason unchanged)."""
    assert _unmonitored(proxy) == {r: before[r] + by.get(r, 0) for r in REASONS}


def _times(turns: Counter[Any], n: int) -> Counter[Any]:
    return Counter({k: v * n for k, v in turns.items()})


def _polled(client: openai.OpenAI, rid: str, polls: int = 10) -> Any:
    """``retrieve`` until the response is no longer queued or in progress."""
    for _ in range(polls):
        got = client.responses.retrieve(rid)
        if got.status not in ("queued", "in_progress"):
            return got
    raise AssertionError(f"{rid} still {got.status}")


@pytest.mark.parametrize("prefix", ["/v1", "/openai/v1", "/openai"])
def test_polled_background_calls_are_turns_once_with_author_and_depth(proxy: Proxy, prefix: str) -> None:
    """A conversation of background calls, each polled through ``in_progress`` to its reply: one
    turn per call (author from ``model``, depth, hand-off), both rules checked once each, nothing
    counted unmonitored; polling a finished call again records nothing more. Azure OpenAI's
    ``/openai/v1`` and ``/openai`` paths too."""
    before, counted = snapshot(proxy), _unmonitored(proxy)
    client = _client(proxy, prefix)
    items: list[Any] = []
    turns = 4
    for d in range(1, turns + 1):
        items.append({"role": "user", "content": f"background {prefix} question {d}"})
        queued = client.responses.create(
            model="gpt-x", input=items, background=True, extra_headers={"x-mock-polls": "2"}
        )
        assert queued.status == "queued" and queued.output_text == ""
        final = _polled(client, queued.id)
        assert final.status == "completed" and final.output_text == responses_text(schedule(d), d)
        assert client.responses.retrieve(queued.id).status == "completed"  # polled again: no turn
        items += [o.model_dump(exclude_none=True) for o in final.output]
    client.close()
    after = snapshot(proxy)
    assert delta(after.turns, before.turns) == expected_turns([schedule(d) for d in range(1, turns + 1)])
    attributed = delta(after.attributions, before.attributions)
    assert attributed.get("unknown", 0) == 0 and sum(attributed.values()) == turns * (turns - 1) // 2
    verdicts: Counter[tuple[str, str]] = Counter()
    for k, n in delta(after.checks, before.checks).items():
        verdicts[k.rule, k.verdict] += n
    assert verdicts == Counter({("no_commas", "fail"): turns, ("says_done", "pass"): turns})
    _grew(proxy, counted)


async def test_async_client_background_call_is_one_turn(proxy: Proxy) -> None:
    """The async SDK: ``await responses.create(background=True)``, then ``retrieve`` polls."""
    import asyncio

    before = await asyncio.to_thread(snapshot, proxy)
    client = openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key="sk-test", max_retries=0)
    queued = await client.responses.create(
        model="gpt-x", input="async background", background=True, extra_headers={"x-mock-polls": "1"}
    )
    statuses = [(await client.responses.retrieve(queued.id)).status for _ in range(3)]
    await client.close()
    assert statuses == ["in_progress", "completed", "completed"]
    after = await asyncio.to_thread(snapshot, proxy)
    assert delta(after.turns, before.turns) == expected_turns([schedule(1)])


def test_an_incomplete_reply_with_output_is_a_turn(proxy: Proxy) -> None:
    """A response that ends ``incomplete`` (``max_output_tokens``) with its text is finished: a
    real, truncated reply, recorded as the call's turn (as the wrapped client and a
    non-background call record it), once; nothing counted without a reply."""
    before, counted, failed = snapshot(proxy), _unmonitored(proxy), _without_reply(proxy)
    client = _client(proxy)
    queued = client.responses.create(
        model="gpt-x",
        input="ends incomplete",
        background=True,
        extra_headers={"x-mock-final-status": "incomplete"},
    )
    final = _polled(client, queued.id)
    assert final.status == "incomplete" and final.output_text == responses_text(schedule(1), 1)
    client.responses.retrieve(queued.id)
    client.close()
    assert delta(snapshot(proxy).turns, before.turns) == expected_turns([schedule(1)])
    _grew(proxy, counted)
    assert _without_reply(proxy) == failed


@pytest.mark.parametrize(
    ("final", "output"),
    [("failed", "kept"), ("failed", "none"), ("cancelled", "kept"), ("incomplete", "none")],
)
def test_a_call_finished_without_a_reply_is_no_turn_and_counted_by_status(
    proxy: Proxy, final: str, output: str
) -> None:
    """Changed (was a turn with an empty reply, failing every rule): a background call whose
    poll finds it ``failed`` or ``cancelled`` (upstream, not through ``serve``; whatever
    output it kept), or ``incomplete`` with no text (its tokens spent on reasoning), is no turn
    and no check; the poll takes the call out, counted once as ``unmonitored{reason="no_reply"}``
    and ``responses_without_reply{status}``; polling again counts nothing more."""
    before, counted, failed = snapshot(proxy), _unmonitored(proxy), _without_reply(proxy)
    client = _client(proxy)
    headers = {"x-mock-final-status": final, "x-mock-final-output": output, "x-mock-polls": "1"}
    queued = client.responses.create(
        model="gpt-x", input=f"ends {final}", background=True, extra_headers=headers
    )
    assert _polled(client, queued.id).status == final
    assert client.responses.retrieve(queued.id).status == final
    client.close()
    after = snapshot(proxy)
    assert sum(delta(after.turns, before.turns).values()) == 0
    assert sum(delta(after.checks, before.checks).values()) == 0
    _grew(proxy, counted, no_reply=1)
    assert _without_reply(proxy) == {s: failed[s] + (s == final) for s in NO_REPLY_STATUSES}
    assert sample(proxy, "handoffmon_proxy_background_calls", {}) == 0


def test_a_parked_call_is_counted_nowhere_until_cancel_or_delete_forget_it(proxy: Proxy) -> None:
    """Waiting, a call is neither a turn nor unmonitored; ``cancel`` and ``delete`` forget it,
    counting it ``unfinished`` once: a later retrieve (``cancelled``) records nothing."""
    before, counted = snapshot(proxy), _unmonitored(proxy)
    client = _client(proxy)
    kw: Any = {"model": "gpt-x", "background": True, "extra_headers": {"x-mock-polls": "5"}}
    cancelled = client.responses.create(input="to be cancelled", **kw)
    deleted = client.responses.create(input="to be deleted", **kw)
    snapshot(proxy)
    _grew(proxy, counted)  # both parked: nothing counted yet
    assert sample(proxy, "handoffmon_proxy_background_calls", {}) == 2
    assert client.responses.cancel(cancelled.id).status == "cancelled"
    snapshot(proxy)
    _grew(proxy, counted, unfinished=1)
    assert client.responses.retrieve(cancelled.id).status == "cancelled"
    client.responses.delete(deleted.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(deleted.id)
    client.close()
    after = snapshot(proxy)
    assert sum(delta(after.turns, before.turns).values()) == 0
    _grew(proxy, counted, unfinished=2)
    assert sample(proxy, "handoffmon_proxy_background_calls", {}) == 0


def test_an_upstream_error_on_a_poll_leaves_the_call_parked(proxy: Proxy) -> None:
    """A poll the upstream answers 503 is forwarded as it came and records nothing; the next
    poll that finds the call finished records its turn."""
    before, counted = snapshot(proxy), _unmonitored(proxy)
    client = _client(proxy)
    queued = client.responses.create(model="gpt-x", input="poll through an outage", background=True)
    with pytest.raises(openai.InternalServerError) as err:
        client.responses.retrieve(queued.id, extra_headers={"x-mock-status": "503"})
    assert err.value.status_code == 503
    assert sum(delta(snapshot(proxy).turns, before.turns).values()) == 0
    assert client.responses.retrieve(queued.id).status == "completed"
    client.close()
    assert delta(snapshot(proxy).turns, before.turns) == expected_turns([schedule(1)])
    _grew(proxy, counted)


def test_bounds_forget_the_oldest_call_and_count_it_unfinished(
    proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``MAX_PARKED`` calls the oldest is forgotten (counted ``unfinished``; its reply,
    retrieved later, no turn); a call whose body alone is past ``MAX_PARKED_BYTES`` is not
    parked (``unfinished`` at once, as before); an expired call is counted when the next call
    is parked."""
    monkeypatch.setattr(bg, "MAX_PARKED", 2)
    monkeypatch.setattr(bg, "MAX_PARKED_BYTES", 64 * 1024)
    before, counted = snapshot(proxy), _unmonitored(proxy)
    client = _client(proxy)
    ids = [client.responses.create(model="gpt-x", input=f"bounded {i}", background=True).id for i in range(3)]
    snapshot(proxy)
    _grew(proxy, counted, unfinished=1)  # the first, pushed out by the third
    assert [_polled(client, rid).status for rid in ids] == ["completed"] * 3
    assert delta(snapshot(proxy).turns, before.turns) == _times(expected_turns([schedule(1)]), 2)
    huge = client.responses.create(model="gpt-x", input="x" * (100 * 1024), background=True)
    assert _polled(client, huge.id).status == "completed"
    snapshot(proxy)
    _grew(proxy, counted, unfinished=2)
    monkeypatch.setattr(bg, "PARKED_TTL_S", 0.2)
    late = client.responses.create(model="gpt-x", input="polled too late", background=True)
    time.sleep(0.3)
    assert _polled(client, late.id).status == "completed"  # expired: forwarded only
    monkeypatch.setattr(bg, "PARKED_TTL_S", 3600.0)
    last = client.responses.create(model="gpt-x", input="expires the one before", background=True)
    assert _polled(client, last.id).status == "completed"
    client.close()
    after = snapshot(proxy)
    assert delta(after.turns, before.turns) == _times(expected_turns([schedule(1)]), 3)
    _grew(proxy, counted, unfinished=3)


def test_a_failing_park_or_poll_read_fails_open(proxy: Proxy, monkeypatch: pytest.MonkeyPatch) -> None:
    """A park that raises: the answer goes out unchanged, counted as a monitor error and
    ``unfinished``. A poll whose read raises: the answer goes out unchanged, counted, the call
    stays parked and the next poll records it."""
    errors = sample(proxy, "handoffmon_monitor_errors_total", {"stage": "integration"})
    before, counted = snapshot(proxy), _unmonitored(proxy)
    client = _client(proxy)

    def broken(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("broken store")

    with monkeypatch.context() as m:
        m.setattr(bg.Background, "park", broken)
        queued = client.responses.create(model="gpt-x", input="park fails", background=True)
    assert queued.status == "queued"
    assert _polled(client, queued.id).status == "completed"
    snapshot(proxy)
    _grew(proxy, counted, unfinished=1)
    parked = client.responses.create(model="gpt-x", input="peek fails", background=True)
    with monkeypatch.context() as m:
        m.setattr(bg.Background, "peek", broken)
        assert client.responses.retrieve(parked.id).output_text == responses_text(schedule(1), 1)
    assert client.responses.retrieve(parked.id).status == "completed"
    client.close()
    after = snapshot(proxy)
    assert delta(after.turns, before.turns) == expected_turns([schedule(1)])
    assert sample(proxy, "handoffmon_monitor_errors_total", {"stage": "integration"}) == errors + 2
    _grew(proxy, counted, unfinished=1)


def test_a_poll_on_another_replica_is_forwarded_only(served: tuple[str, Proxy]) -> None:
    """Two replicas: the call parked on the first, polled on the second, which forwards the
    reply and records nothing; the first records the turn when it is polled there. A call
    still parked when its replica shuts down is counted ``unfinished`` by the drain."""
    config = proxy_config(served[0], rules=RULES)
    with running_proxy(config) as first, running_proxy(config) as second:
        queued = httpx.post(
            f"{first.url}/v1/responses", json={"model": "gpt-x", "input": "two replicas", "background": True}
        ).json()
        elsewhere = httpx.get(f"{second.url}/v1/responses/{queued['id']}")
        assert elsewhere.json()["status"] == "completed"
        assert snapshot(second).turns == {} and snapshot(first).turns == {}
        assert httpx.get(f"{first.url}/v1/responses/{queued['id']}").json()["status"] == "completed"
        assert snapshot(first).turns == expected_turns([schedule(1)])
        assert snapshot(second).turns == {}
        body = {"model": "gpt-x", "input": "never polled", "background": True}
        assert httpx.post(f"{second.url}/v1/responses", json=body).json()["status"] == "queued"
        assert sample(second, UNMONITORED, {"reason": "unfinished"}) == 0
    assert sample(second, UNMONITORED, {"reason": "unfinished"}) == 1
    assert sample(first, UNMONITORED, {"reason": "unfinished"}) == 0


def test_a_streamed_retrieve_is_not_recorded(proxy: Proxy) -> None:
    """``GET /v1/responses/{id}?stream=true`` is forwarded only (as the wrapped client's
    ``retrieve(id, stream=True)``): the call stays parked for a plain poll."""
    before = snapshot(proxy)
    client = _client(proxy)
    queued = client.responses.create(model="gpt-x", input="resumed as a stream", background=True)
    client.close()
    streamed = httpx.get(f"{proxy.url}/v1/responses/{queued.id}", params={"stream": "true"})
    assert streamed.status_code == 200  # this upstream answers JSON either way
    assert sum(delta(snapshot(proxy).turns, before.turns).values()) == 0
    assert httpx.get(f"{proxy.url}/v1/responses/{queued.id}").json()["status"] == "completed"
    assert delta(snapshot(proxy).turns, before.turns) == expected_turns([schedule(1)])


def test_gzip_answers_are_read_from_an_inflated_copy(proxy: Proxy) -> None:
    """The queued answer and the polls under ``Content-Encoding: gzip`` (the SDK asks for it):
    parked, then recorded from the inflated poll answer."""
    before, counted = snapshot(proxy), _unmonitored(proxy)
    client = _client(proxy)
    gz = {"x-mock-gzip": "1", "x-mock-polls": "1"}
    queued = client.responses.create(model="gpt-x", input="gzip please", background=True, extra_headers=gz)
    assert queued.status == "queued"
    assert client.responses.retrieve(queued.id, extra_headers=gz).status == "in_progress"
    final = client.responses.retrieve(queued.id, extra_headers=gz)
    assert final.output_text == responses_text(schedule(1), 1)
    client.close()
    again = httpx.get(f"{proxy.url}/v1/responses/{queued.id}", headers=gz)
    assert again.headers["content-encoding"] == "gzip" and again.json()["status"] == "completed"
    assert delta(snapshot(proxy).turns, before.turns) == expected_turns([schedule(1)])
    _grew(proxy, counted)


def test_the_turn_carries_the_calls_latency_and_the_finished_response(proxy: Proxy) -> None:
    """Latency from the call to the poll that found it finished (not the poll's own); the
    turn's author, depth and response id those of the finished response."""
    rec = RecordingExporter()
    proxy.monitor.add_exporter(rec)
    client = _client(proxy)
    started = time.perf_counter()
    queued = client.responses.create(model="gpt-x", input="how long did it take", background=True)
    time.sleep(0.3)
    final = client.responses.retrieve(queued.id)
    took = time.perf_counter() - started
    client.close()
    snapshot(proxy)
    assert len(rec.results) == 1
    result = rec.results[0]
    assert 0.3 <= result.record.latency_s <= took
    assert (result.record.author, result.context.depth) == (schedule(1), 1)
    assert result.record.response_id == final.id == queued.id


def test_only_an_answer_that_can_be_unfinished_is_parsed_on_the_request_path(
    proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call whose input mentions ``background`` but that is answered finished: its answer is
    read on the attribution thread only, as any call's, not parsed again on the event loop to see
    whether it is to be parked. A background call's queued answer is parsed there (and parked)."""
    on_loop: list[int] = []
    real = Forwarder.document

    def spy(self: Forwarder, headers: Any, data: bytes) -> Any:
        try:
            asyncio.get_running_loop()
            on_loop.append(len(data))
        except RuntimeError:  # the attribution thread
            pass
        return real(self, headers, data)

    monkeypatch.setattr(Forwarder, "document", spy)
    before = snapshot(proxy)
    client = _client(proxy)
    done = client.responses.create(model="gpt-x", input="what is in the background of this photo?")
    assert done.status == "completed"
    assert on_loop == []
    queued = client.responses.create(model="gpt-x", input="a background question", background=True)
    assert queued.status == "queued" and len(on_loop) == 1
    assert _polled(client, queued.id).status == "completed"
    client.close()
    after = snapshot(proxy)
    assert delta(after.turns, before.turns) == _times(expected_turns([schedule(1)]), 2)
