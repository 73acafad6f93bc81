"""Pins the fingerprint functions: fast path = normalized path, chain order, text cache bound."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from handoffmon.attribution import Attributor, normalize_message
from handoffmon.attribution.fingerprint import (
    CHAIN_SEED,
    UNCHAINED_ROLES,
    TextCache,
    chain_step,
    content_fingerprint,
    message_digest,
    raw_digest,
)
from handoffmon.stores.memory import MemoryStore

_text = st.text(alphabet=st.sampled_from("ab \n\tZ.!é"), max_size=40)
_part = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, _text),
    st.builds(lambda u: {"type": "image_url", "image_url": {"url": u}}, _text),
    st.builds(lambda r: {"type": "refusal", "refusal": r}, _text),
)
_content = st.one_of(st.none(), _text, st.lists(_part, max_size=3))
_calls = st.lists(
    st.builds(
        lambda i, a: {"id": i, "type": "function", "function": {"name": "f", "arguments": a}},
        st.sampled_from(["c1", "c2"]),
        st.sampled_from(['{"x": 1}', '{"x":1}', "not json", ""]),
    ),
    max_size=2,
)


@st.composite
def _messages(draw: st.DrawFn) -> dict[str, Any]:
    msg: dict[str, Any] = {}
    if draw(st.integers(0, 9)):  # rarely no role at all (normalizes as "user")
        msg["role"] = draw(st.sampled_from(["user", "assistant", "tool", "system", "developer"]))
    if draw(st.integers(0, 4)):  # sometimes no content key at all (a tool-call-only message)
        msg["content"] = draw(_content)
    if draw(st.booleans()):
        msg["tool_calls"] = draw(_calls)
    if draw(st.booleans()):
        msg["tool_call_id"] = draw(st.sampled_from(["c1", "c2"]))
    if draw(st.booleans()):
        msg["name"] = "bob"
    if not draw(st.integers(0, 3)):  # structured outputs' refusal field
        msg["refusal"] = draw(st.one_of(_text, st.none()))
    return msg


@settings(max_examples=200, deadline=None)
@given(_messages())
def test_cached_fast_path_equals_normalized_message_digest(msg: dict[str, Any]) -> None:
    """The hot path's digest of a raw message equals the digest of its normalized form."""
    cache = TextCache()
    r1, d1, n1 = raw_digest(msg, cache)
    r2, d2, n2 = raw_digest(msg, cache)  # second time through the cache
    norm = normalize_message(msg)
    assert (d1, n1) == (d2, n2) == message_digest(norm)
    assert r1 == r2 == norm.role


def _reference_chain(history: list[dict[str, Any]]) -> tuple[int, list[int]]:
    """The chain as specified, from normalized messages (no caches, no inlining)."""
    h, chains = CHAIN_SEED, []
    for msg in map(normalize_message, history):
        if msg.role in UNCHAINED_ROLES:
            continue
        h = chain_step(h, msg.role, message_digest(msg)[0])
        if msg.role == "assistant":
            chains.append(h)
    return h, chains


@settings(max_examples=200, deadline=None)
@given(st.lists(_messages(), max_size=8))
def test_attributor_hot_loop_computes_the_specified_chain(history: list[dict[str, Any]]) -> None:
    """The inlined scan in Attributor yields exactly the reference chained fingerprints."""
    attributor = Attributor(MemoryStore())
    for _ in range(2):  # cold, then through the text cache
        scan = attributor._scan(history)
        assert (scan.fingerprint, scan.chains) == _reference_chain(history)


def test_chain_depends_on_order_and_role() -> None:
    """Swapping two messages or changing a role changes the chained fingerprint."""
    a, b = 11, 22
    ab = chain_step(chain_step(CHAIN_SEED, "user", a), "assistant", b)
    ba = chain_step(chain_step(CHAIN_SEED, "user", b), "assistant", a)
    roles = chain_step(chain_step(CHAIN_SEED, "tool", a), "assistant", b)
    assert len({ab, ba, roles}) == 3


def test_short_content_fingerprint_depends_on_context_long_does_not() -> None:
    """Short replies' content keys bind to the preceding message; long ones stand alone."""
    assert content_fingerprint(5, 3, 100, 32) != content_fingerprint(5, 3, 200, 32)
    assert content_fingerprint(5, 40, 100, 32) == content_fingerprint(5, 40, 200, 32) == 5


def test_text_cache_is_bounded_by_estimated_bytes() -> None:
    """The folded-text cache never holds more than max_bytes of keys plus per-entry overhead."""
    cache = TextCache(max_bytes=64_000)
    for i in range(200):
        cache.text(f"message number {i} " + "x" * 500)
        held = sum(len(k) + TextCache.ENTRY_OVERHEAD_BYTES for k in cache.entries)
        assert held <= 64_000
    assert 0 < len(cache) < 200


def test_text_cache_skips_huge_strings_but_digests_them() -> None:
    """A string over max_bytes/64 is digested like any other but not kept."""
    cache = TextCache(max_bytes=64_000)
    huge = "word " * 1000
    assert cache.text(huge) == cache.text(" ".join(huge.split()))[:3]
    assert huge not in cache.entries


def test_text_cache_bound_holds_for_many_short_messages() -> None:
    """The cache's byte estimate covers what its entries really cost (tracemalloc), so
    many short messages stay within ``max_bytes`` instead of only their characters."""
    import sys
    import tracemalloc

    keys = [f"message number {i:08d} with some words" for i in range(20_000)]
    cache = TextCache(max_bytes=10**9)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for k in keys:
        cache.text(k)
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    # the cache keeps the key strings alive, so they count against it too
    real_per_entry = (grown + sum(sys.getsizeof(k) for k in keys)) / len(keys)
    estimated_per_entry = len(keys[0]) + TextCache.ENTRY_OVERHEAD_BYTES
    assert real_per_entry <= estimated_per_entry, (real_per_entry, estimated_per_entry)

    small = TextCache(max_bytes=1_000_000)
    for k in keys:
        small.text(k)
    assert len(small) * estimated_per_entry <= 1_000_000


def test_a_refusal_is_one_text_as_a_field_a_part_or_the_content() -> None:
    """A refusal the model gave in ``refusal`` (content null) and the same refusal sent back as a
    refusal part, or as the content, have one digest: the reply is recognised whichever way
    the client resends it. (Before: the part was an opaque placeholder and the field was not
    read at all.)"""
    r = "I cannot help with that request, sorry about it."
    shapes = [
        {"role": "assistant", "content": None, "refusal": r},
        {"role": "assistant", "refusal": r},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": r}]},
        {"role": "assistant", "content": f"  {r}\n"},
    ]
    cache = TextCache()
    assert {raw_digest(m, cache)[1:] for m in shapes} == {
        raw_digest({"role": "assistant", "content": r}, cache)[1:]
    }
    other = raw_digest({"role": "assistant", "content": None, "refusal": r + " No."}, cache)
    assert other != raw_digest(shapes[0], cache)


def test_a_name_is_left_out_of_every_digest() -> None:
    """``name`` is the application's label (an agent's or participant's name, never in a model's
    reply): a message with or without one has one digest, whatever its role, and a tool call or
    tool-call id still counts."""
    cache = TextCache()
    for role in ("user", "assistant", "tool", "function", "system"):
        for extra in ({}, {"tool_call_id": "c1"}, {"tool_calls": [{"id": "c1", "function": {"name": "f"}}]}):
            plain = {"role": role, "content": "the same words", **extra}
            named = {**plain, "name": "bot"}
            assert raw_digest(named, cache) == raw_digest(plain, cache)
            assert message_digest(normalize_message(named)) == message_digest(normalize_message(plain))
    bare = raw_digest({"role": "tool", "content": "x"}, cache)
    assert raw_digest({"role": "tool", "content": "x", "tool_call_id": "c1"}, cache) != bare


def test_a_role_holding_a_lone_surrogate_is_chained_not_degraded() -> None:
    """JSON lets a client send ``"role": "\\ud800"``; salting that role raised
    UnicodeEncodeError and the whole turn was degraded. It is a role like any other now, and
    the reply after it is attributed."""
    errors: list[BaseException] = []
    attributor = Attributor(MemoryStore(), on_error=lambda _stage, exc: errors.append(exc))
    history: list[dict[str, Any]] = [{"role": "\ud800", "content": "odd"}, {"role": "user", "content": "hi"}]
    ctx = attributor.attribute(history)
    attributor.persist(attributor.record(ctx, "Hello!", ["m-a"]))
    ctx = attributor.attribute(
        [*history, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "x"}]
    )
    assert not ctx.degraded and errors == []
    assert [(a.author, a.method) for a in ctx.attributions] == [("m-a", "chain")]


def test_text_cache_bound_holds_for_text_stored_four_bytes_a_character() -> None:
    """CPython stores a string holding an emoji at 4 bytes a character; the estimate counted
    characters, so such messages filled the cache to ~2.3x ``max_bytes`` (measured with
    tracemalloc). It counts the string's bytes now."""
    import sys
    import tracemalloc

    keys = [f"message {i:08d} " + "🙂" * 2_000 for i in range(2_000)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    cache = TextCache(max_bytes=1_000_000)
    for k in keys:
        cache.text(k)
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    held = grown + sum(sys.getsizeof(k) for k in cache.entries)  # the cache keeps its keys alive
    assert 0 < len(cache) < len(keys) and held <= 1_000_000, held
