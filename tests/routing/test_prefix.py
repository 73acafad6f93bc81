"""The request-time prefix lookup agrees with full attribution, and fails open."""

from __future__ import annotations

import random
from typing import Any

from handoffmon.attribution import Attributor
from handoffmon.errors import StoreError
from handoffmon.protocols import Authorship
from handoffmon.routing.prefix import PrefixLookup
from handoffmon.stores.guard import GuardedStore
from handoffmon.stores.memory import MemoryStore

MODELS = ("atlas", "birch", "cedar")
SHORT = ("Sure!", "OK.", "Done.", "Yes")


def _reply(rng: random.Random, k: int) -> str:
    if rng.random() < 0.3:
        return rng.choice(SHORT)  # short replies: content key bound to the preceding message
    return f"reply {k} " + " ".join(str(rng.randrange(10**6)) for _ in range(12))


def _play(attributor: Attributor, rng: random.Random, turns: int) -> list[dict[str, Any]]:
    """A conversation of ``turns`` recorded replies (random authors, system messages sprinkled in)."""
    history: list[dict[str, Any]] = [{"role": "system", "content": f"sys {rng.random()}"}]
    for k in range(turns):
        history.append({"role": "user", "content": rng.choice(("hi", f"question {rng.random()}"))})
        if rng.random() < 0.2:
            history.append({"role": "developer", "content": "timestamp " + str(rng.random())})
        ctx = attributor.attribute(history)
        reply = _reply(rng, k)
        recorded = attributor.record(ctx, reply, [rng.choice(MODELS)])
        if rng.random() < 0.7:  # some stay pending in the overlay, as right after a reply
            attributor.persist(recorded)
        history.append({"role": "assistant", "content": reply})
    history.append({"role": "user", "content": "next"})
    return history


def test_lookup_agrees_with_full_attribution() -> None:
    """On 300 random conversations (short replies, system/developer messages, pending replies) the
    lookup never names a different author than attribute() finds for the same history; it answers
    None only where a content key collided (the same short reply after the same message by two
    models: the chain tells them apart, the content key cannot), and answers most of them."""
    rng = random.Random(3)
    attributor = Attributor(MemoryStore())
    lookup = PrefixLookup(attributor)
    answered = 0
    for _ in range(300):
        history = _play(attributor, rng, rng.randrange(1, 8))
        ctx = attributor.attribute(history)
        prefix, home = lookup.authors(history, home=True)
        first = ctx.attributions[0].author
        if prefix is None:
            assert ctx.prefix_model == "unknown" or len(history[-2]["content"]) < 32
        else:
            assert prefix == ctx.prefix_model
            answered += 1
        assert home in (None, first)
    assert answered > 240
    assert lookup.authors(history, home=True)[1] is not None


def test_first_turn_and_unrecorded_histories_have_no_prefix() -> None:
    """No assistant message, or one handoffmon never recorded: (None, None)."""
    lookup = PrefixLookup(Attributor(MemoryStore()))
    assert lookup.authors([{"role": "user", "content": "hi"}], home=True) == (None, None)
    foreign = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x" * 40}]
    assert lookup.authors(foreign, home=True) == (None, None)
    assert lookup.authors(foreign) == (None, None)


class _Broken(MemoryStore):
    def get_many(self, keys: Any) -> list[Authorship | None]:
        raise StoreError("down")


def test_store_failure_fails_open_and_is_counted() -> None:
    """A failing store answers unknown (no exception), and the guard counts it."""
    failures: list[tuple[str, str]] = []
    store = GuardedStore(_Broken(), on_failure=lambda op, kind: failures.append((op, kind)))
    lookup = PrefixLookup(Attributor(store))
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "y" * 40}]
    assert lookup.authors(history) == (None, None)
    assert failures == [("get", "errors")]


def test_without_content_keys_the_lookup_answers_nothing() -> None:
    """attribution.content_fallback off: no content keys are recorded, so the lookup does not guess."""
    attributor = Attributor(MemoryStore(), content_fallback=False)
    history = _play(attributor, random.Random(1), 2)
    assert PrefixLookup(attributor).authors(history, home=True) == (None, None)


def test_continued_histories_read_the_recorded_chain() -> None:
    """Responses API calls continuing a history the provider keeps (ADR 0011): on random chains
    (by ``previous_response_id`` or in a ``conversation`` object, 1-80 turns, some replies
    still pending) the lookup's prefix is the one full attribution of the continuing call finds,
    and its home model is the first author while the recorded authors reach back that far
    (``RESPONSE_AUTHORS``), else unknown rather than wrong."""
    from handoffmon.attribution.attributor import RESPONSE_AUTHORS
    from handoffmon.ingress.request import ResponseLink

    rng = random.Random(11)
    attributor = Attributor(MemoryStore())
    lookup = PrefixLookup(attributor)
    for trial in range(40):
        by_conversation = trial % 2 == 1
        conversation = f"conv_{trial}" if by_conversation else None
        previous: str | None = None
        authors: list[str] = []
        for k in range(rng.choice((1, 2, 5, 30, 63, 64, 65, 80))):
            ctx = attributor.attribute(
                [{"role": "user", "content": f"q {trial} {k}"}],
                previous_response_id=previous,
                provider_conversation=conversation,
            )
            author = rng.choice(MODELS)
            rid = f"resp_{trial}_{k}"
            recorded = attributor.record(
                ctx, f"answer {trial} {k} {rng.random()}", [author], rid, conversation
            )
            if rng.random() < 0.7:
                attributor.persist(recorded)
            authors.append(author)
            previous = None if by_conversation else rid
        link = ResponseLink(previous, True, conversation)
        prefix, home = lookup.authors([{"role": "user", "content": "next"}], home=True, link=link)
        ctx = attributor.attribute(
            [{"role": "user", "content": "next"}],
            previous_response_id=previous,
            provider_conversation=conversation,
        )
        assert prefix == ctx.prefix_model == authors[-1]
        assert home == (authors[0] if len(authors) <= RESPONSE_AUTHORS else None)


def test_a_continued_calls_own_assistant_message_is_the_newer_prefix() -> None:
    """A continuing call whose input carries an assistant message of its own: that message's
    author is the prefix (it comes after the stored history); the home model stays the stored
    history's first. An unknown previous response: no prefix, no home."""
    from handoffmon.ingress.request import ResponseLink

    attributor = Attributor(MemoryStore())
    lookup = PrefixLookup(attributor)
    ctx = attributor.attribute([{"role": "user", "content": "first question"}])
    attributor.persist(
        attributor.record(ctx, "a first answer from atlas, long enough to key", ["atlas"], "resp_1")
    )
    own = [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "a first answer from atlas, long enough to key"},
    ]
    ctx = attributor.attribute([*own, {"role": "user", "content": "second"}])
    reply = "a second answer by birch, long enough for its content key"
    attributor.persist(attributor.record(ctx, reply, ["birch"]))
    history = [*own, {"role": "user", "content": "second"}, {"role": "assistant", "content": reply}]
    link = ResponseLink("resp_1", True)
    assert lookup.authors(history[-2:], home=True, link=link) == ("birch", "atlas")
    assert lookup.authors([{"role": "user", "content": "x"}], home=True, link=link) == ("atlas", "atlas")
    assert lookup.authors([], home=True, link=ResponseLink("resp_unknown", True)) == (None, None)
