"""A call continuing a stored response sends only its new input; its ``history_chars`` and
``history_tokens`` still count the whole history the model continues (ADR 0011): what the
conversation's deepest turn left, kept in the conversation state, plus the new input.

Checked against the same conversation sent with its whole history each call, on every store
(Redis: the turns of all conversations checked in one batch), and for the cases where the
size is not known: a branch from an earlier response, a chain whose start was never seen."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis

from handoffmon.ingress import Outcome, ResponseLink
from handoffmon.pipeline.monitor import Monitor
from handoffmon.pipeline.state import ConversationState
from handoffmon.testing import RecordingExporter
from handoffmon.types import TurnResult
from tests.conftest import require_redis
from tests.pipeline.helpers import make_config, request

CONVERSATIONS = 3
DEPTH = 4


def _reply(i: int, depth: int) -> dict[str, Any]:
    words = " ".join(f"w{i}{depth}{k}" for k in range(3 + 2 * depth))  # replies of growing size
    return {"role": "assistant", "content": f"Reply {depth} of conversation {i}: {words}."}


def _drive(m: Monitor, chained: bool) -> None:
    """CONVERSATIONS conversations of DEPTH turns, interleaved turn by turn (one Redis batch
    holds a turn of each); ``chained``: each call after the first sends only its new user
    message and continues the previous response by id, else it sends the whole history."""
    histories: list[list[dict[str, Any]]] = [
        [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": f"open {i}"}]
        for i in range(CONVERSATIONS)
    ]
    for depth in range(DEPTH):
        for i, history in enumerate(histories):
            previous = f"resp-{i}-{depth - 1}" if chained and depth else None
            sent = history[-1:] if previous else history
            req = request(m, sent, metadata={"conversation_id": f"c{i}"})._replace(
                link=ResponseLink(previous, True)
            )
            reply = _reply(i, depth)
            m.finish(
                m.capture(req), reply, Outcome((f"m{(i + depth) % 2}",), response_id=f"resp-{i}-{depth}")
            )
            history += [reply, {"role": "user", "content": f"question {depth} of {i}, with more words"}]


def _sizes(results: list[TurnResult]) -> dict[tuple[str, int], tuple[int, int]]:
    return {
        (r.context.conversation_id, r.context.depth): (r.context.history_chars, r.context.history_tokens)
        for r in results
    }


def _run(store: dict[str, Any], chained: bool) -> tuple[list[TurnResult], Monitor]:
    exp = RecordingExporter()
    m = Monitor(make_config(store=store), exporters=[exp], start=False)
    with m:
        _drive(m, chained)
        m.start()
        assert m.flush(20)
        assert m.snapshot().monitor_errors == {}
    return exp.results, m


@pytest.mark.parametrize("backend", ["memory", "sqlite", "redis"])
def test_a_chained_call_counts_the_history_it_does_not_send(backend: str, tmp_path: Any) -> None:
    store: dict[str, Any] = {"backend": backend}
    prefixes = [f"hm-test-{uuid.uuid4().hex}:" for _ in range(2)]
    if backend == "sqlite":
        store["path"] = str(tmp_path / "keys.db")
    if backend == "redis":
        require_redis()
        store["key_prefix"] = prefixes[0]
    full, _ = _run(store, chained=False)
    if backend == "sqlite":
        store["path"] = str(tmp_path / "keys-chained.db")
    if backend == "redis":
        store["key_prefix"] = prefixes[1]
    chained, m = _run(store, chained=True)
    if backend == "redis":
        assert m._checks.batched  # checked in batches: a conversation's turns fold within one
        client = redis.Redis(host="127.0.0.1", port=6379)
        for prefix in prefixes:
            keys = client.keys(f"{prefix}*")
            if keys:
                client.delete(*keys)
        client.close()
    assert len(full) == len(chained) == CONVERSATIONS * DEPTH
    assert _sizes(chained) == _sizes(full)
    earlier_replies = sum(len(_reply(0, d)["content"]) for d in range(DEPTH - 1))
    assert _sizes(chained)[("c0", DEPTH)][0] > earlier_replies  # the history it did not send
    assert {a.method for r in chained if r.context.depth > 1 for a in r.context.attributions} == {
        "response_id"
    }


def test_a_branch_or_an_unknown_chain_counts_the_new_input_only() -> None:
    """Continuing an earlier response than the conversation's deepest (a branch), or a
    response handoffmon never saw, sends a history of unknown size: the new input is a lower
    bound, and the conversation's kept size is left as its deepest turn set it."""
    exp = RecordingExporter()
    with Monitor(make_config(), exporters=[exp]) as m:

        def call(text: str, previous: str | None, rid: str) -> None:
            req = request(m, [{"role": "user", "content": text}], metadata={"conversation_id": "c"})
            req = req._replace(link=ResponseLink(previous, True))
            m.finish(
                m.capture(req),
                {"role": "assistant", "content": f"answer to {text}"},
                Outcome(("m",), response_id=rid),
            )
            assert m.flush(10)

        call("first question", None, "r1")
        call("second question", "r1", "r2")
        call("a branch from the first answer", "r1", "r3")
        call("continuing a response never seen", "r-unknown", "r4")
    sizes = [r.context.history_chars for r in exp.results]
    assert sizes[1] == len("first question") + len("answer to first question") + len("second question")
    assert sizes[2] == len("a branch from the first answer")
    assert sizes[3] == len("continuing a response never seen")
    assert [r.context.depth for r in exp.results] == [1, 2, 2, 2]


def test_the_kept_size_round_trips_and_older_states_read_as_unknown() -> None:
    state, _, _ = ConversationState().fold(3, "m", "m", True, (), chars=1234)
    assert ConversationState.from_mapping(state.to_mapping()).chars == 1234
    older = {k: v for k, v in state.to_mapping().items() if k != "chars"}  # written before it was kept
    assert ConversationState.from_mapping(older) == ConversationState(depth=3)
    # a regenerated earlier turn does not replace the deepest turn's size
    again, _, _ = state.fold(2, "m", "m", True, (), chars=10)
    assert again.chars == 1234 and again.depth == 3
    deeper, _, _ = state.fold(4, "m", "m", True, (), chars=2000)
    assert deeper.chars == 2000
