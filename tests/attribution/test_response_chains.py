"""Responses API chains (ADR 0011): a call continuing a stored response by
``previous_response_id`` carries only its new input; the hidden history is attributed from
the response's key, on every store, and reads as the same history sent in full would."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from handoffmon.attribution import Attributor
from handoffmon.attribution.fingerprint import RESPONSE_AUTHORS, response_key
from handoffmon.config import StoreConfig
from handoffmon.protocols import AttributionStore
from handoffmon.stores.memory import MemoryStore
from handoffmon.stores.sqlite import SQLiteStore
from handoffmon.testing import FakeClock
from handoffmon.types import TurnContext
from tests.conftest import require_redis

LONG = [
    "Here is a detailed answer about the refund policy and how it applies to you.",
    "The second answer goes into the exceptions to the policy, with three examples.",
    "Finally, a summary of everything we discussed, with the next steps to take.",
    "One more reply, long enough to get a content key of its own in the store.",
]


def _redis_store() -> AttributionStore:
    from handoffmon.stores.redis import RedisStore

    require_redis()
    return RedisStore(StoreConfig(backend="redis", key_prefix=f"hm-test:{uuid.uuid4().hex}:", timeout_s=1.0))


@pytest.fixture(params=["memory", "sqlite", "redis"])
def attributor(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Attributor]:
    """An Attributor over each store: the chain must not depend on the backend."""
    clock = FakeClock()
    store: AttributionStore
    if request.param == "memory":
        store = MemoryStore(clock=clock)
    elif request.param == "sqlite":
        store = SQLiteStore(tmp_path / "attr.db", clock=clock)
    else:
        store = _redis_store()
    yield Attributor(store, clock=clock)
    store.close()


def _reply(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def _continue(
    att: Attributor, previous: str | None, new_input: list[dict[str, Any]], answer: str, author: str, rid: str
) -> TurnContext:
    """One Responses call: attribute, record the reply under ``rid``, persist; its context."""
    ctx = att.attribute(new_input, previous_response_id=previous)
    att.persist(att.record(ctx, _reply(answer), [author], response_id=rid))
    return ctx


def test_a_chain_reads_as_the_full_history(attributor: Attributor) -> None:
    """Depth, prefix model, purity, authors and conversation id of each continued call are
    what the same conversation sent in full gets; the hidden messages say ``response_id``."""
    c1 = _continue(attributor, None, [{"role": "user", "content": "Refunds?"}], LONG[0], "gpt-4o", "resp_1")
    c2 = _continue(
        attributor, "resp_1", [{"role": "user", "content": "Exceptions?"}], LONG[1], "claude", "resp_2"
    )
    c3 = _continue(
        attributor, "resp_2", [{"role": "user", "content": "Summary?"}], LONG[2], "claude", "resp_3"
    )
    c4 = attributor.attribute([{"role": "user", "content": "Thanks"}], previous_response_id="resp_3")
    assert [c.depth for c in (c1, c2, c3, c4)] == [1, 2, 3, 4]
    assert [c.prefix_model for c in (c2, c3, c4)] == ["gpt-4o", "claude", "claude"]
    assert [(a.index, a.author, a.depth, a.method) for a in c4.attributions] == [
        (-3, "gpt-4o", 1, "response_id"),
        (-2, "claude", 2, "response_id"),
        (-1, "claude", 3, "response_id"),
    ]
    assert c4.prefix_purity == pytest.approx(2 / 3) and c4.prefix_authors == 2
    assert c3.prefix_purity == pytest.approx(1 / 2)
    # one conversation: the first turn's id carries through the chain
    assert c1.conversation_id.startswith("pending-") or c1.conversation_id
    ids = {c2.conversation_id, c3.conversation_id, c4.conversation_id}
    assert len(ids) == 1 and c2.conversation_id_source == "derived"

    full = [
        {"role": "user", "content": "Refunds?"},
        _reply(LONG[0]),
        {"role": "user", "content": "Exceptions?"},
        _reply(LONG[1]),
        {"role": "user", "content": "Summary?"},
        _reply(LONG[2]),
        {"role": "user", "content": "Thanks"},
    ]
    sent_in_full = attributor.attribute(full)  # the same history, sent statelessly: content keys
    assert sent_in_full.depth == c4.depth and sent_in_full.prefix_model == c4.prefix_model
    assert sent_in_full.prefix_purity == pytest.approx(c4.prefix_purity)
    assert [a.author for a in sent_in_full.attributions] == [a.author for a in c4.attributions]
    assert sent_in_full.conversation_id == c4.conversation_id


def test_a_continuation_is_found_before_its_predecessor_is_persisted(attributor: Attributor) -> None:
    """An agent loop sends the next call at once: the reply's response key is in the overlay."""
    ctx = attributor.attribute([{"role": "user", "content": "Go"}], previous_response_id=None)
    recorded = attributor.record(ctx, _reply(LONG[0]), ["gpt-4o"], response_id="resp_a")
    nxt = attributor.attribute(
        [{"role": "tool", "tool_call_id": "c1", "content": "42"}], previous_response_id="resp_a"
    )
    assert nxt.depth == 2 and nxt.prefix_model == "gpt-4o"
    assert nxt.attributions[-1].method == "response_id"
    attributor.persist(recorded)
    assert attributor.pending == 0
    again = attributor.attribute([{"role": "user", "content": "Go on"}], previous_response_id="resp_a")
    assert again.depth == 2 and again.conversation_id == nxt.conversation_id


def test_an_unknown_previous_response_is_one_unknown_message_and_a_stable_id(attributor: Attributor) -> None:
    """A response recorded before handoffmon ran (or expired): the hidden history is one
    ``unknown`` message, depth a lower bound (2), and the chain keeps one derived id onwards."""
    c1 = _continue(
        attributor, "resp_old", [{"role": "user", "content": "More"}], LONG[0], "gpt-4o", "resp_n1"
    )
    assert c1.depth == 2 and c1.prefix_model == "unknown"
    assert [a.method for a in c1.attributions] == ["unknown"]
    c2 = attributor.attribute([{"role": "user", "content": "Again"}], previous_response_id="resp_n1")
    assert c2.depth == 3 and c2.prefix_model == "gpt-4o"
    assert [a.method for a in c2.attributions] == ["unknown", "response_id"]
    assert c2.conversation_id == c1.conversation_id and c1.conversation_id_source == "derived"
    # the same unknown predecessor continued again: the same id (deterministic across replicas)
    assert (
        attributor.attribute(
            [{"role": "user", "content": "x"}], previous_response_id="resp_old"
        ).conversation_id
        == c1.conversation_id
    )


def test_caller_conversation_id_wins(attributor: Attributor) -> None:
    _continue(attributor, None, [{"role": "user", "content": "Hi"}], LONG[0], "gpt-4o", "resp_c1")
    ctx = attributor.attribute(
        [{"role": "user", "content": "Next"}], previous_response_id="resp_c1", conversation_id="mine"
    )
    assert ctx.conversation_id == "mine" and ctx.conversation_id_source == "caller" and ctx.depth == 2


def test_visible_assistant_items_after_the_hidden_history(attributor: Attributor) -> None:
    """Input that carries assistant messages of its own (an app replaying an earlier reply)
    attributes them after the hidden history, by content key."""
    _continue(attributor, None, [{"role": "user", "content": "A"}], LONG[0], "gpt-4o", "resp_v1")
    _continue(attributor, "resp_v1", [{"role": "user", "content": "B"}], LONG[1], "claude", "resp_v2")
    ctx = attributor.attribute(
        [_reply(LONG[1]), {"role": "user", "content": "C"}], previous_response_id="resp_v1"
    )
    assert [(a.index, a.author, a.method) for a in ctx.attributions] == [
        (-1, "gpt-4o", "response_id"),
        (0, "claude", "content"),
    ]
    assert ctx.depth == 3 and ctx.prefix_model == "claude"


def test_a_reply_not_stored_by_the_provider_gets_no_response_key(attributor: Attributor) -> None:
    ctx = attributor.attribute([{"role": "user", "content": "Hi"}])
    recorded = attributor.record(ctx, _reply(LONG[0]), ["gpt-4o"])
    assert not any(k.startswith("r:") for k, _ in recorded.items)
    attributor.persist(recorded)
    nxt = attributor.attribute([{"role": "user", "content": "?"}], previous_response_id="resp_never")
    assert nxt.prefix_model == "unknown"


def test_long_chains_keep_the_depth_and_the_last_authors(attributor: Attributor) -> None:
    """A chain deeper than ``RESPONSE_AUTHORS``: depth stays exact, the summary holds the
    last ``RESPONSE_AUTHORS`` messages, and the key's value stays bounded."""
    previous = None
    turns = RESPONSE_AUTHORS + 6
    for i in range(turns):
        author = "gpt-4o" if i % 10 else "claude"
        rid = f"resp_long_{i}"
        _continue(attributor, previous, [{"role": "user", "content": f"q{i}"}], f"{LONG[0]} {i}", author, rid)
        previous = rid
    ctx = attributor.attribute([{"role": "user", "content": "end"}], previous_response_id=previous)
    assert ctx.depth == turns + 1
    assert len(ctx.attributions) == RESPONSE_AUTHORS
    assert [a.depth for a in ctx.attributions] == list(range(turns - RESPONSE_AUTHORS + 1, turns + 1))
    assert ctx.prefix_model == "gpt-4o" and ctx.prefix_authors == 2
    stored = attributor.store.get_many([response_key(previous)])[0]
    assert stored is not None and len(stored.authors) == RESPONSE_AUTHORS


def test_a_reused_response_id_attributes_nothing_rather_than_something_wrong(attributor: Attributor) -> None:
    """An upstream that hands out one id for different responses (LiteLLM's ``mock_response``
    does): the key becomes a collision marker once both are persisted, so a call continuing it
    reads an ``unknown`` history, never one of the two."""
    _continue(attributor, None, [{"role": "user", "content": "one"}], LONG[0], "gpt-4o", "resp_same")
    _continue(attributor, None, [{"role": "user", "content": "two"}], LONG[1], "claude", "resp_same")
    ctx = attributor.attribute([{"role": "user", "content": "next"}], previous_response_id="resp_same")
    assert ctx.prefix_model == "unknown" and [a.method for a in ctx.attributions] == ["unknown"]


def _in_conversation(
    att: Attributor, conversation: str, text: str, answer: str, author: str, persist: bool = True
) -> TurnContext:
    """One Responses call continuing provider conversation ``conversation``."""
    ctx = att.attribute([{"role": "user", "content": text}], provider_conversation=conversation)
    recorded = att.record(ctx, _reply(answer), [author], conversation=conversation)
    if persist:
        att.persist(recorded)
    return ctx


def test_a_conversation_object_reads_as_the_full_history(attributor: Attributor) -> None:
    """Calls continuing one ``conversation`` object: the first opens it (depth 1), each later
    one gets its hidden history from the conversation's head; the conversation id names it."""
    c1 = _in_conversation(attributor, "conv_a", "Refunds?", LONG[0], "gpt-4o")
    c2 = _in_conversation(attributor, "conv_a", "Exceptions?", LONG[1], "claude")
    c3 = _in_conversation(attributor, "conv_a", "Summary?", LONG[2], "claude")
    assert [c.depth for c in (c1, c2, c3)] == [1, 2, 3]
    assert [c.prefix_model for c in (c1, c2, c3)] == ["none", "gpt-4o", "claude"]
    assert [(a.index, a.author, a.depth, a.method) for a in c3.attributions] == [
        (-2, "gpt-4o", 1, "response_id"),
        (-1, "claude", 2, "response_id"),
    ]
    assert c3.prefix_purity == pytest.approx(1 / 2) and c3.prefix_authors == 2
    assert {c.conversation_id for c in (c1, c2, c3)} == {"conv_a"}
    assert c1.conversation_id_source == "caller"
    other = _in_conversation(attributor, "conv_b", "Hello", LONG[3], "claude")
    assert other.depth == 1 and other.conversation_id == "conv_b"


def test_a_conversation_head_is_found_before_it_is_persisted(attributor: Attributor) -> None:
    _in_conversation(attributor, "conv_fast", "Go", LONG[0], "gpt-4o", persist=False)
    nxt = attributor.attribute([{"role": "user", "content": "on"}], provider_conversation="conv_fast")
    assert nxt.depth == 2 and nxt.prefix_model == "gpt-4o"


def test_another_replica_moves_a_conversation_on(attributor: Attributor) -> None:
    """Two processes on one store take turns in a conversation: each reads the store's head,
    which is deeper than the one it recorded itself (a stale local head would go back)."""
    replica = Attributor(attributor.store, clock=FakeClock())
    _in_conversation(attributor, "conv_r", "one", LONG[0], "gpt-4o")
    _in_conversation(replica, "conv_r", "two", LONG[1], "claude")
    ctx = attributor.attribute([{"role": "user", "content": "three"}], provider_conversation="conv_r")
    assert ctx.depth == 3 and ctx.prefix_model == "claude"
    assert [a.author for a in ctx.attributions] == ["gpt-4o", "claude"]


def test_a_malformed_conversation_head_is_ignored(attributor: Attributor) -> None:
    """A head another writer left unusable: the call reads as opening the conversation."""
    from handoffmon.attribution.fingerprint import conversation_head_key
    from handoffmon.protocols import Authorship

    attributor.store.put_many([(conversation_head_key("conv_bad"), Authorship((), 3, 0.0, "conv_bad"))])
    ctx = attributor.attribute([{"role": "user", "content": "x"}], provider_conversation="conv_bad")
    assert ctx.depth == 1 and ctx.prefix_model == "none"


def test_a_caller_conversation_id_cannot_reach_a_head(attributor: Attributor) -> None:
    """Heads are not conversation states: a caller sending the id a head used to be kept under
    (``hm-conversation-head:0x…``, audit e12) neither reads the head as its state nor moves the
    conversation by writing one."""
    from handoffmon.attribution.fingerprint import response_fingerprint

    old_id = "hm-conversation-head:" + hex(response_fingerprint("conversation:conv_v"))
    _in_conversation(attributor, "conv_v", "one", LONG[0], "gpt-4o")
    _in_conversation(attributor, "conv_v", "two", LONG[1], "claude")
    assert attributor.store.get_state(old_id) is None
    forged = {"v": 1, "authors": ["evil"] * 3, "depth": 40, "conversation_id": "conv_v", "rev": 1}
    attributor.store.put_state(old_id, forged)
    ctx = attributor.attribute([{"role": "user", "content": "three"}], provider_conversation="conv_v")
    assert ctx.depth == 3 and ctx.prefix_model == "claude"
    assert [a.author for a in ctx.attributions] == ["gpt-4o", "claude"]
