"""A ``background=True`` Responses call's reply arrives through ``responses.retrieve``: the
wrapped OpenAI client records the call's turn with the first retrieved response that is
finished — once, however often the application polls — and forgets calls it cancels or
deletes. The parked calls are bounded in number, age and history bytes
(``integrations.background``).

A real ``openai`` client talks HTTP to a loopback upstream that answers a background call
``queued``, its first retrieve ``in_progress`` and later ones ``completed``."""

from __future__ import annotations

import inspect
import itertools
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from handoffmon.integrations.openai_client import OpenAIClientWrapper
from handoffmon.runtime import background as bg
from handoffmon.testing import RecordingExporter
from tests.conftest import free_port
from tests.integrations.test_responses_background import CONFIG, REPLY, response_doc, send_doc
from tests.pipeline.helpers import monitor
from tests.proxy.mock_upstream import ServerThread, read_request


class RetrieveUpstream:
    """``POST /v1/responses`` (``queued`` for a background call), ``GET /v1/responses/{id}``
    (``in_progress`` the first time, then ``completed``), ``POST .../cancel``; counts GETs."""

    def __init__(self) -> None:
        self.polls: dict[str, int] = {}
        self.ids = itertools.count(1)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = await read_request(scope, receive, send)
        if body is None:
            return
        path: str = scope["path"]
        if scope["method"] == "POST" and path == "/v1/responses":
            req = json.loads(body)
            rid = f"resp_{next(self.ids)}"
            self.polls[rid] = 0
            doc = response_doc(rid, "queued" if req.get("background") else "completed")
        elif path.endswith("/cancel"):
            doc = response_doc(path.split("/")[-2], "cancelled")
        else:
            rid = path.rsplit("/", 1)[-1]
            self.polls[rid] = self.polls.get(rid, 0) + 1
            doc = response_doc(rid, "in_progress" if self.polls[rid] == 1 else "completed")
        await send_doc(send, doc)


@pytest.fixture(scope="module")
def api_base() -> Iterator[str]:
    with ServerThread(RetrieveUpstream(), free_port()) as srv:
        yield f"{srv.url}/v1"


async def _maybe(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _client(api_base: str, is_async: bool, m: Any) -> OpenAIClientWrapper:
    raw = openai.AsyncOpenAI if is_async else openai.OpenAI
    return OpenAIClientWrapper(raw(api_key="k", base_url=api_base, max_retries=0), m)


def _verdicts(exp: RecordingExporter) -> list[tuple[int, str, str]]:
    return [(r.context.depth, c.rule, c.verdict) for r in exp.results for c in r.checks]


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("metadata", [None, {"tags": "bg"}], ids=["read_later", "read_now"])
async def test_the_retrieved_reply_of_a_background_call_is_its_turn_once(
    api_base: str, is_async: bool, metadata: Any
) -> None:
    """create → queued (no turn); retrieve → in_progress (no turn); retrieve → completed (the
    turn, its reply checked); retrieve again → still one turn. The application gets the SDK's
    objects unchanged. The recorded reply then attributes the conversation's next call."""
    exp = RecordingExporter()
    extra = {} if metadata is None else {"metadata": metadata}
    with monitor(CONFIG, exporters=[exp]) as m:
        client = _client(api_base, is_async, m)
        queued = await _maybe(client.responses.create(model="gpt-bg", input="hi", background=True, **extra))
        assert queued.status == "queued" and len(client.responses._turns.background) == 1
        statuses = [(await _maybe(client.responses.retrieve(queued.id))).status for _ in range(3)]
        assert statuses == ["in_progress", "completed", "completed"]
        assert m.flush(10)
        assert _verdicts(exp) == [(1, "says_enough", "pass")]
        assert len(client.responses._turns.background) == 0
        history = [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": REPLY},
            {"role": "user", "content": "and then?"},
        ]
        await _maybe(client.responses.create(model="gpt-bg", input=history, **extra))
        assert m.flush(10)
    turns = [(r.context.depth, r.context.prefix_model) for r in exp.results]
    assert turns == [(1, "none"), (2, "gpt-bg")]  # the retrieved reply was recorded as gpt-bg's


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_copy_retrieves_the_originals_background_call(api_base: str, is_async: bool) -> None:
    """Created through the wrapper, retrieved through a ``with_options`` copy: one turn."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        client = _client(api_base, is_async, m)
        queued = await _maybe(client.responses.create(model="gpt-bg", input="hi", background=True))
        copy = client.with_options(timeout=30.0)
        for _ in range(3):
            await _maybe(copy.responses.retrieve(queued.id))
        assert m.flush(10)
    assert _verdicts(exp) == [(1, "says_enough", "pass")]


async def test_cancel_forgets_the_call_and_unknown_ids_pass_through(api_base: str) -> None:
    """A cancelled call is no turn, whatever is retrieved later; a retrieve of an id never
    parked (another process's call, a finished one) records nothing."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        client = _client(api_base, False, m)
        queued = client.responses.create(model="gpt-bg", input="hi", background=True)
        assert client.responses.cancel(queued.id).status == "cancelled"
        for _ in range(2):
            client.responses.retrieve(queued.id)
        assert client.responses.retrieve("resp_elsewhere").status == "in_progress"
        assert client.responses.retrieve("resp_elsewhere").status == "completed"
        assert m.flush(10)
    assert exp.results == []


def test_parked_calls_are_bounded_in_number_age_and_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The oldest call goes past ``MAX_PARKED`` calls or ``MAX_PARKED_BYTES`` of history; an
    expired call is not taken; a call is taken once; a history too large alone is not parked."""
    now = [0.0]
    monkeypatch.setattr(bg, "MAX_PARKED", 3)
    monkeypatch.setattr(bg, "MAX_PARKED_BYTES", 100)
    parked = bg.Background(lambda ctx: ctx, clock=lambda: now[0])
    for i in range(4):
        assert parked.park(f"r{i}", 10, float(i))
    assert len(parked) == 3 and not parked.waiting("r0") and parked.waiting("r3")
    assert parked.park("big", 90, 0.0)  # 30 + 90 > 100: the oldest go until it fits
    assert len(parked) == 2 and parked.held == 100 and parked.waiting("r3")
    assert not parked.park("huge", 101, 0.0) and parked.held == 100
    assert not parked.park(None, 1, 0.0) and not parked.park("", 1, 0.0)
    got = parked.take("big")
    assert got is not None and got.ctx == 90 and parked.take("big") is None and parked.held == 10
    assert parked.take("r3") is not None and parked.held == 0
    parked.park("old", 1, 0.0)
    now[0] = bg.PARKED_TTL_S + 1
    assert not parked.waiting("old") and parked.take("old") is None and parked.held == 0
    parked.park("a", 1, 0.0)
    now[0] += bg.PARKED_TTL_S + 1
    parked.park("b", 1, 0.0)  # parking expires what is older
    assert len(parked) == 1 and parked.held == 1
