"""Pins every attribution case: chain, content fallback, edits, truncation, ids, fail-open."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from handoffmon.attribution import Attributor, ModelNames
from handoffmon.attribution.conversation import PENDING_PREFIX
from handoffmon.protocols import AttributionStore, Authorship
from handoffmon.stores.memory import MemoryStore
from handoffmon.stores.sqlite import SQLiteStore
from handoffmon.testing import FakeClock
from handoffmon.types import TurnContext
from tests.attribution.chat import Chat
from tests.stores.helpers import run_in_threads

LONG_A = "Here is a detailed answer about the refund policy and how it applies to you."
LONG_B = "The second answer goes into the exceptions to the policy, with three examples."
LONG_C = "Finally, a summary of everything we discussed, with the next steps to take."


@pytest.fixture(params=["memory", "sqlite"])
def attributor(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Attributor]:
    """An Attributor over each embedded store: the semantics must not depend on the backend."""
    clock = FakeClock()
    store: AttributionStore
    if request.param == "memory":
        store = MemoryStore(clock=clock)
    else:
        store = SQLiteStore(tmp_path / "attr.db", clock=clock)
    yield Attributor(store, clock=clock)
    store.close()


def _three_turns(attributor: Attributor, **kw: object) -> Chat:
    chat = Chat(attributor, **kw)  # type: ignore[arg-type]
    chat.turn("What is the refund policy?", LONG_A, "gpt-4o")
    chat.turn("Any exceptions?", LONG_B, "claude")
    chat.turn("Summarize please.", LONG_C, "claude")
    return chat


def test_chain_attributes_every_reply_with_author_depth_and_method(attributor: Attributor) -> None:
    """Each earlier assistant message gets its true author and depth, by chained fingerprint."""
    chat = _three_turns(attributor)
    ctx = chat.ask("Thanks!")
    assert [(a.author, a.depth, a.method) for a in ctx.attributions] == [
        ("gpt-4o", 1, "chain"),
        ("claude", 2, "chain"),
        ("claude", 3, "chain"),
    ]
    assert [a.index for a in ctx.attributions] == [1, 3, 5]
    assert ctx.depth == 4


def test_depth_one_has_no_prefix_and_is_never_a_handoff(attributor: Attributor) -> None:
    """The first turn: depth 1, prefix `none`, purity 1, no handoff whoever answers."""
    ctx = Chat(attributor).ask("Hello")
    assert (ctx.depth, ctx.prefix_model, ctx.prefix_purity, ctx.prefix_authors) == (1, "none", 1.0, 0)
    assert ctx.attributions == ()
    assert ctx.handoff_for("gpt-4o") is False


def test_prefix_model_purity_authors_and_handoff(attributor: Attributor) -> None:
    """Prefix = author of the previous reply; purity = its share; handoff = author differs."""
    chat = _three_turns(attributor)
    ctx = chat.ask("Thanks!")
    assert ctx.prefix_model == "claude"
    assert ctx.prefix_purity == pytest.approx(2 / 3)
    assert ctx.prefix_authors == 2
    assert ctx.handoff_for("gpt-4o") is True
    assert ctx.handoff_for("claude") is False
    assert chat.contexts[1].handoff_for("claude") is True


def test_history_size_in_chars_and_approximate_tokens(attributor: Attributor) -> None:
    """history_chars counts normalized content of all messages; tokens = ceil(chars / 4)."""
    chat = Chat(attributor, system="Be  brief.")
    ctx = chat.ask("Hi   there")
    assert ctx.history_chars == len("Be brief.") + len("Hi there")
    assert ctx.history_tokens == (ctx.history_chars + 3) // 4 == 5


def test_none_content_with_tool_calls_and_tool_messages(attributor: Attributor) -> None:
    """A tool-calling reply (content None) and the tool result chain like any message."""
    chat = Chat(attributor)
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_9",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
            }
        ],
    }
    chat.ask("Weather in Oslo?")
    chat.answer(call, ["gpt-4o"])
    chat.history.append({"role": "tool", "tool_call_id": "call_9", "content": '{"temp": 3}'})
    ctx = chat.attributor.attribute(chat.history)
    assert [(a.author, a.method) for a in ctx.attributions] == [("gpt-4o", "chain")]
    chat.contexts.append(ctx)
    chat.answer("It is 3 degrees in Oslo.", ["claude"])
    ctx = chat.ask("Thanks")
    assert [(a.author, a.depth, a.method) for a in ctx.attributions] == [
        ("gpt-4o", 1, "chain"),
        ("claude", 2, "chain"),
    ]


def test_tool_call_arguments_reserialized_by_client_still_chain(attributor: Attributor) -> None:
    """A client that re-serializes tool-call arguments (spacing, key order) keeps the chain."""
    chat = Chat(attributor)
    chat.ask("Book it")
    args = '{"a": 1, "b": [1, 2]}'
    chat.answer({"role": "assistant", "content": None, "tool_calls": [_call("c1", args)]}, ["gpt-4o"])
    chat.history[-1] = {"role": "assistant", "tool_calls": [_call("c1", '{"b":[1,2],"a":1}')]}
    ctx = chat.ask("ok")
    assert ctx.attributions[0].method == "chain"


def _call(call_id: str, args: str) -> dict[str, object]:
    return {"id": call_id, "type": "function", "function": {"name": "book", "arguments": args}}


def test_list_of_parts_resent_by_client_still_chains(attributor: Attributor) -> None:
    """A reply recorded as text and resent as a list of text parts keeps its chain."""
    chat = Chat(attributor)
    chat.turn("hi", LONG_A, "gpt-4o")
    chat.history[-1] = {"role": "assistant", "content": [{"type": "text", "text": LONG_A}]}
    ctx = chat.ask([{"type": "text", "text": "and"}, {"type": "image_url", "image_url": {"url": "u"}}])
    assert [(a.author, a.method) for a in ctx.attributions] == [("gpt-4o", "chain")]


def test_changing_system_prompt_does_not_break_the_chain(attributor: Attributor) -> None:
    """System messages are not chained: a per-request timestamp keeps chain attribution."""
    chat = Chat(attributor, system="Now: 12:00:00")
    chat.turn("q1", LONG_A, "gpt-4o")
    chat.history[0]["content"] = "Now: 12:00:07"
    chat.history.insert(2, {"role": "system", "content": "memory: user likes brevity"})
    ctx = chat.ask("q2")
    assert [(a.author, a.method) for a in ctx.attributions] == [("gpt-4o", "chain")]
    assert ctx.conversation_id == chat.recorded[0].conversation_id


def test_truncated_history_uses_content_fallback_and_stored_depth(attributor: Attributor) -> None:
    """Front-truncated history: content method, and depth from the stored depth, not counting."""
    chat = _three_turns(attributor)
    chat.history = chat.history[2:]  # drop turn 1 (user + assistant)
    ctx = chat.ask("Thanks!")
    assert [(a.author, a.depth, a.method) for a in ctx.attributions] == [
        ("claude", 2, "content"),
        ("claude", 3, "content"),
    ]
    assert ctx.depth == 4
    assert ctx.prefix_model == "claude"


def test_truncation_after_an_unknown_message_counts_from_latest_known(attributor: Attributor) -> None:
    """Depth = stored depth of the latest attributed message + later assistant messages."""
    chat = _three_turns(attributor)
    chat.history = chat.history[2:]
    chat.history[-1] = {"role": "assistant", "content": "edited by the client entirely"}
    ctx = chat.ask("Thanks!")
    assert [a.author for a in ctx.attributions] == ["claude", "unknown"]
    assert ctx.depth == 4


def test_truncated_history_keeps_a_derived_conversation_id(attributor: Attributor) -> None:
    """The derived id survives truncation: it is read from the stored earliest attributed reply."""
    chat = _three_turns(attributor)
    original = chat.contexts[-1].conversation_id
    chat.history = chat.history[4:]
    ctx = chat.ask("Thanks!")
    assert ctx.conversation_id == original
    assert ctx.conversation_id_source == "derived"


def test_truncated_history_of_unknown_messages_gets_a_new_derived_id(attributor: Attributor) -> None:
    """If nothing remaining is attributable, the id is derived from the first remaining reply."""
    chat = Chat(attributor)
    chat.history = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "never produced by handoffmon, so not in the store"},
    ]
    ctx = chat.ask("next")
    assert ctx.attributions[0].method == "unknown"
    assert ctx.conversation_id.startswith("h-") and not ctx.conversation_id.startswith(PENDING_PREFIX)


def test_same_short_reply_in_many_conversations_has_distinct_chain_keys(attributor: Attributor) -> None:
    """ "Sure!" in ten conversations: ten chain keys, each attributed to its own author."""
    authors = [f"model-{i % 3}" for i in range(10)]
    chats = []
    for i, author in enumerate(authors):
        chat = Chat(attributor)
        chat.turn(f"Can you help me with task {i}?", "Sure!", author)
        chats.append(chat)
    assert len({c.recorded[0].fingerprint for c in chats}) == 10
    for chat, author in zip(chats, authors, strict=True):
        assert chat.ask("Go on").attributions[0].author == author


def test_short_reply_content_fallback_does_not_misattribute(attributor: Attributor) -> None:
    """After a chain break, "Sure!" that different models said after the same prompt → unknown."""
    for author in ("gpt-4o", "claude"):
        chat = Chat(attributor, system="s")
        chat.turn(f"warm-up for {author} with its own long enough opening", LONG_A + author, author)
        chat.turn("Can you help?", "Sure!", author)
    truncated = Chat(attributor)
    truncated.history = [
        {"role": "user", "content": "Can you help?"},
        {"role": "assistant", "content": "Sure!"},
    ]
    ctx = truncated.ask("go")
    assert [(a.author, a.method) for a in ctx.attributions] == [("unknown", "unknown")]


def test_short_reply_content_key_is_bound_to_its_prompt(attributor: Attributor) -> None:
    """A short reply is found by content (after truncation) only with the prompt it answered."""
    chat = Chat(attributor)
    chat.turn("opening question that is long enough", LONG_A, "gpt-4o")
    chat.turn("Can you help with the invoice?", "Sure!", "claude")
    kept = chat.history[2:]
    assert Chat(attributor)._replace(kept).ask("next").attributions[0].author == "claude"
    other = [{"role": "user", "content": "Different prompt"}, {"role": "assistant", "content": "Sure!"}]
    assert Chat(attributor)._replace(other).ask("next").attributions[0].author == "unknown"


def test_long_content_said_by_two_models_is_a_collision(attributor: Attributor) -> None:
    """A long reply recorded for two different authors attributes nothing by content."""
    boiler = "I'm sorry, but I can't help with that request. Is there anything else?"
    Chat(attributor).turn("bad request one", boiler, "gpt-4o")
    Chat(attributor).turn("bad request two", boiler, "claude")
    lone = [{"role": "assistant", "content": boiler}]
    ctx = Chat(attributor)._replace(lone).ask("why?")
    assert ctx.attributions[0].author == "unknown"


def test_same_long_content_same_author_keeps_author_but_not_depth(attributor: Attributor) -> None:
    """Same text, same author, different depths: author kept by content, depth unknown."""
    boiler = "I'm sorry, but I can't help with that request. Is there anything else?"
    Chat(attributor).turn("bad request one", boiler, "gpt-4o")
    chat = Chat(attributor)
    chat.turn("fine question", LONG_A, "gpt-4o")
    chat.turn("bad request two", boiler, "gpt-4o")
    ctx = Chat(attributor)._replace([{"role": "assistant", "content": boiler}]).ask("why?")
    assert (ctx.attributions[0].author, ctx.attributions[0].depth) == ("gpt-4o", None)


def test_client_edited_message_is_unknown_and_nothing_else_changes(attributor: Attributor) -> None:
    """Editing one assistant message: it becomes unknown; the others keep author and depth."""
    chat = _three_turns(attributor)
    before = chat.ask("Thanks!")
    chat.history[3] = {"role": "assistant", "content": LONG_B + " (edited)"}
    after = attributor.attribute(chat.history)
    assert [(a.author, a.depth) for a in after.attributions] == [
        ("gpt-4o", 1),
        ("unknown", None),
        ("claude", 3),
    ]
    assert [a.method for a in after.attributions] == ["chain", "unknown", "content"]
    assert (after.depth, after.prefix_model) == (before.depth, before.prefix_model)
    assert after.conversation_id == before.conversation_id


def test_retrying_the_same_turn_does_not_create_a_collision(attributor: Attributor) -> None:
    """Recording the same reply twice (a client retry) keeps it attributable."""
    chat = Chat(attributor)
    ctx = chat.ask("Can you help?")
    attributor.persist(attributor.record(ctx, "Sure!", ["gpt-4o"]))
    chat.contexts.append(ctx)
    chat.answer("Sure!", ["gpt-4o"])
    assert chat.ask("go").attributions[0].author == "gpt-4o"


def test_two_model_turn_records_both_authors(attributor: Attributor) -> None:
    """A mid-stream fallback continuation: authors (A, B), author = B, both count as authors."""
    chat = Chat(attributor)
    chat.turn("Write a story", LONG_A, "gpt-4o", "claude")
    ctx = chat.ask("More")
    a = ctx.attributions[0]
    assert (a.author, a.authors) == ("claude", ("gpt-4o", "claude"))
    assert ctx.prefix_model == "claude"
    assert ctx.prefix_authors == 2


def test_derived_id_is_fixed_at_record_from_the_first_reply(attributor: Attributor) -> None:
    """Depth 1 has a provisional id; record() fixes `h-<chain fp of reply>`; depth 2 reuses it."""
    chat = Chat(attributor)
    ctx = chat.ask("hello")
    assert ctx.conversation_id.startswith(PENDING_PREFIX)
    recorded = chat.answer(LONG_A, ["gpt-4o"])
    assert recorded.conversation_id == "h-" + recorded.fingerprint.removeprefix("c:0x").rjust(16, "0")
    assert chat.ask("more").conversation_id == recorded.conversation_id
    chat.answer(LONG_B, ["gpt-4o"])
    assert chat.ask("more again").conversation_id == recorded.conversation_id


def test_identical_openings_from_different_users_do_not_merge(attributor: Attributor) -> None:
    """Two users open with the same message; different replies give different ids."""
    one, two = Chat(attributor), Chat(attributor)
    one.turn("hi", "Hello! What can I do for you today, friend?", "gpt-4o")
    two.turn("hi", "Hi there! How may I help you this afternoon?", "gpt-4o")
    assert one.ask("x").conversation_id != two.ask("x").conversation_id


def test_caller_id_wins_over_derivation(attributor: Attributor) -> None:
    """A caller-supplied id is used as is, source `caller`, and stays through record()."""
    chat = Chat(attributor, conversation_id="conv-42")
    ctx = chat.ask("hi")
    assert (ctx.conversation_id, ctx.conversation_id_source) == ("conv-42", "caller")
    assert chat.answer(LONG_A, ["gpt-4o"]).conversation_id == "conv-42"


def test_reply_is_attributable_before_persist(attributor: Attributor) -> None:
    """record() makes a reply attributable at once (overlay); persist() empties the overlay."""
    chat = Chat(attributor)
    chat.ask("q")
    recorded = chat.answer(LONG_A, ["gpt-4o"], persist=False)
    assert attributor.pending == 2
    assert chat.ask("q2").attributions[0].author == "gpt-4o"
    attributor.persist(recorded)
    assert attributor.pending == 0
    assert attributor.attribute(chat.history).attributions[0].author == "gpt-4o"


def test_overlay_is_bounded() -> None:
    """The pending overlay never holds more than pending_max keys."""
    attributor = Attributor(MemoryStore(), pending_max=10)
    for i in range(20):
        Chat(attributor).ask(f"q{i}")
        attributor.record(
            attributor.attribute([{"role": "user", "content": f"q{i}"}]), LONG_A + str(i), ["m"]
        )
    assert attributor.pending <= 10


class BrokenStore(MemoryStore):
    def get_many(self, keys):  # type: ignore[no-untyped-def]
        raise OSError("store down")


def test_store_failure_fails_open_to_unknown_and_reports() -> None:
    """A raising store: attribute() returns unknown attributions and calls on_error."""
    seen: list[tuple[str, str]] = []
    attributor = Attributor(BrokenStore(), on_error=lambda stage, exc: seen.append((stage, str(exc))))
    history = [{"role": "user", "content": "q"}, {"role": "assistant", "content": LONG_A}]
    ctx = attributor.attribute([*history, {"role": "user", "content": "q2"}])
    assert [a.author for a in ctx.attributions] == ["unknown"]
    assert (ctx.depth, ctx.prefix_model, ctx.degraded) == (2, "unknown", False)
    assert seen == [("attribution", "store down")]
    assert attributor.errors == 1


def test_store_failure_still_sees_pending_replies() -> None:
    """While the store is down, replies recorded in this process stay attributable."""
    attributor = Attributor(BrokenStore(), on_error=lambda *_: None)
    chat = Chat(attributor)
    chat.ask("q")
    chat.answer(LONG_A, ["gpt-4o"], persist=False)
    assert chat.ask("q2").attributions[0].author == "gpt-4o"


def test_garbage_history_gives_a_degraded_context() -> None:
    """A history that cannot be read yields a degraded context, never an exception."""
    seen: list[str] = []
    attributor = Attributor(MemoryStore(), on_error=lambda stage, exc: seen.append(stage))
    ctx = attributor.attribute(42)  # type: ignore[arg-type]
    assert ctx.degraded and ctx.depth == 1 and seen == ["attribution"]
    assert attributor.record(ctx, "reply", ["gpt-4o"]).items == ()


def test_unknown_authors_are_not_recorded(attributor: Attributor) -> None:
    """A reply whose author is unknown is not stored (it would attribute nothing)."""
    ctx = attributor.attribute([{"role": "user", "content": "q"}])
    assert attributor.record(ctx, LONG_A, ["unknown"]).items == ()
    assert attributor.record(ctx, LONG_A, []).items == ()


def test_content_fallback_off_leaves_broken_chains_unknown() -> None:
    """With content_fallback disabled only chain keys are written and read."""
    attributor = Attributor(MemoryStore(), content_fallback=False)
    chat = _three_turns(attributor)
    assert all(len(r.items) == 1 for r in chat.recorded)
    chat.history = chat.history[2:]
    assert [a.method for a in chat.ask("x").attributions] == ["unknown", "unknown"]


class CountingStore(MemoryStore):
    """Records every get_many call's keys."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[str]] = []

    def get_many(self, keys):  # type: ignore[no-untyped-def]
        self.calls.append(list(keys))
        return super().get_many(keys)


def test_one_store_call_with_chain_and_content_keys() -> None:
    """A history this process did not just extend: one get_many with chain then content keys."""
    store = CountingStore()
    chat = _three_turns(Attributor(store))
    store.calls.clear()
    Attributor(store).attribute([*chat.history, {"role": "user", "content": "x"}])
    assert [[k[:2] for k in call] for call in store.calls] == [["c:"] * 3 + ["k:"] * 3]


def test_verified_history_asks_only_chain_keys() -> None:
    """Extending a fully chained history recorded here: one call, chain keys only."""
    store = CountingStore()
    chat = _three_turns(Attributor(store))
    store.calls.clear()
    ctx = chat.ask("x")
    assert [[k[:2] for k in call] for call in store.calls] == [["c:"] * 3]
    assert [a.method for a in ctx.attributions] == ["chain"] * 3


def test_verified_history_with_a_lost_chain_key_falls_back_by_content() -> None:
    """If a chain key vanished (eviction, expiry), a second call finds it by content."""
    store = CountingStore()
    chat = _three_turns(Attributor(store))
    first_chain_key = chat.recorded[0].items[0][0]
    store.put_many([(first_chain_key, Authorship((), 0, 0.0, ""))])  # lost to a collision
    store.calls.clear()
    ctx = chat.ask("x")
    assert [(a.author, a.method) for a in ctx.attributions] == [
        ("gpt-4o", "content"),
        ("claude", "chain"),
        ("claude", "chain"),
    ]
    assert [[k[:2] for k in call] for call in store.calls] == [["c:"] * 3, ["k:"]]


def test_sdk_objects_in_history_attribute_like_dicts(attributor: Attributor) -> None:
    """Histories of OpenAI SDK message objects hash exactly like their dict forms."""
    from openai.types.chat import ChatCompletionMessage

    chat = Chat(attributor)
    chat.turn("q", LONG_A, "gpt-4o")
    objects = [chat.history[0], ChatCompletionMessage(role="assistant", content=LONG_A)]
    ctx = attributor.attribute([*objects, {"role": "user", "content": "x"}])
    assert [(a.author, a.method) for a in ctx.attributions] == [("gpt-4o", "chain")]


def test_stored_collision_marker_is_read_as_unknown(attributor: Attributor) -> None:
    """An entry with no authors (a collision marker) attributes nothing, even by chain."""
    chat = Chat(attributor)
    recorded = chat.turn("q", LONG_A, "gpt-4o") and chat.recorded[0]
    attributor.store.put_many([(k, Authorship((), 0, 0.0)) for k, _ in recorded.items])
    assert chat.ask("x").attributions[0].author == "unknown"


def test_record_canonicalizes_authors() -> None:
    """Raw deployment ids passed to record() are stored under their canonical names."""
    attributor = Attributor(MemoryStore(), names=ModelNames({"azure-eu-4o": "gpt-4o"}))
    chat = Chat(attributor)
    chat.turn("q", LONG_A, "azure-eu-4o", "claude")
    assert chat.ask("x").attributions[0].authors == ("gpt-4o", "claude")


def test_concurrent_conversations_on_threads(attributor: Attributor) -> None:
    """Conversations played on parallel threads through one Attributor stay exact."""

    def play(t: int) -> None:
        chat = Chat(attributor)
        for k in range(15):
            chat.turn(f"thread {t} question {k}", f"thread {t} answer {k}: {LONG_A}", f"m{(t + k) % 3}")
        ctx = chat.ask("last")
        assert [a.author for a in ctx.attributions] == [f"m{(t + k) % 3}" for k in range(15)]
        assert all(a.method == "chain" for a in ctx.attributions) and ctx.depth == 16

    assert run_in_threads(play, 4) == []


def test_identical_histories_answered_by_different_models_are_not_misattributed(
    attributor: Attributor,
) -> None:
    """Same opening, same reply text, different models: indistinguishable, so `unknown`."""
    one, two = Chat(attributor), Chat(attributor)
    one.turn("hi", "Hello! How can I help you today?", "gpt-4o")
    two.turn("hi", "Hello! How can I help you today?", "claude")
    assert [a.author for a in one.ask("x").attributions] == ["unknown"]
    assert [a.author for a in two.ask("y").attributions] == ["unknown"]


@pytest.mark.parametrize("role", [["user"], {"r": 1}, 7])
def test_non_string_roles_are_attributed_not_degraded(attributor: Attributor, role: object) -> None:
    """A role that is a list, dict or number (found by the serve fuzz suite: ``role in
    UNCHAINED_ROLES`` raised on unhashable roles) takes the generic path: no failure, not degraded."""
    errors: list[str] = []
    attributor._on_error = lambda stage, exc: errors.append(stage)
    ctx = attributor.attribute([{"role": role, "content": "hello there"}, {"role": "user", "content": "x"}])
    assert errors == []
    assert not ctx.degraded


def _prefilled(attributor: Attributor, marked: bool) -> tuple[TurnContext, TurnContext]:
    """One gpt-4o turn, then a turn prefilled with ``{`` (``prefix: true`` when ``marked``) that
    claude continues, sent back as one message; the contexts of the prefilled turn and the next."""
    chat = Chat(attributor)
    chat.turn("What is the refund policy?", LONG_A, "gpt-4o")
    prefill: dict[str, object] = {"role": "assistant", "content": "{", **({"prefix": True} if marked else {})}
    chat.history += [{"role": "user", "content": "As JSON please."}, prefill]
    prefilled = attributor.attribute(chat.history)
    reply = '"refund_days": 30}'
    attributor.persist(attributor.record(prefilled, reply, ["claude"]))
    chat.history[-1] = {"role": "assistant", "content": "{" + reply}
    nxt = chat.ask("Thanks!")
    assert [(a.author, a.depth, a.method) for a in nxt.attributions] == [
        ("gpt-4o", 1, "chain"),
        ("claude", 2, "chain"),
    ]
    assert (nxt.depth, nxt.prefix_model) == (3, "claude")
    truncated = [m for m in chat.history if m["content"] != LONG_A]  # found by content too
    assert [(a.author, a.method) for a in attributor.attribute(truncated).attributions] == [
        ("claude", "content")
    ]
    return prefilled, nxt


def test_a_prefill_and_its_reply_sent_back_as_one_message_are_attributed(attributor: Attributor) -> None:
    """A history ending in an assistant message the application wrote (Anthropic's prefill:
    ``{`` to force JSON) asks the model to continue it; the application then sends prefill and
    reply back as one message. That message was ``unknown``; it is the replying model's now, at
    the turn's true depth (the prefilled turn counted the prefill as an earlier turn)."""
    prefilled, _ = _prefilled(attributor, marked=False)
    assert prefilled.attributions[-1].method == "unknown"  # the prefill, not attributable


def test_a_models_message_at_the_end_of_a_history_is_a_turn_not_a_prefill(attributor: Attributor) -> None:
    """A history ending in a message a model wrote (another agent's turn) is no prefill: the
    next reply is not also keyed as that message joined to it."""
    chat = Chat(attributor)
    chat.turn("Plan the trip.", LONG_A, "gpt-4o")
    ctx = attributor.attribute(chat.history)
    assert ctx.attributions[-1].method == "chain"
    recorded = attributor.record(ctx, LONG_B, ["claude"])
    assert len(recorded.items) == 2  # the reply's chain and content keys only


def test_a_prefill_marked_prefix_true_is_no_earlier_turn(attributor: Attributor) -> None:
    """``{"role": "assistant", "content": "{", "prefix": true}`` (DeepSeek, Mistral, LiteLLM)
    says the reply continues that message: the prefilled turn's depth and prefix model are
    those of the history before it (it counted as an ``unknown`` earlier turn), and prefill +
    reply sent back as one message are the replying model's at that depth."""
    prefilled, _ = _prefilled(attributor, marked=True)
    assert [(a.author, a.method) for a in prefilled.attributions] == [("gpt-4o", "chain")]
    assert (prefilled.depth, prefilled.prefix_model, prefilled.handoff_for("claude")) == (2, "gpt-4o", True)
