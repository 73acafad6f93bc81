"""Pins message normalization: folding, None content, parts, tool calls, SDK objects."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from openai.types.chat import ChatCompletionMessage

from handoffmon.attribution import normalize_message, normalize_messages
from handoffmon.attribution.normalize import content_text, tool_calls_text
from handoffmon.types import Message


def test_whitespace_is_folded() -> None:
    """Runs of whitespace (newlines, tabs) become one space; ends are stripped."""
    msg = normalize_message({"role": "assistant", "content": "  Hello,\n\n  world!\t "})
    assert msg == Message(role="assistant", content="Hello, world!")


def test_none_content_is_empty_text() -> None:
    """`None` content is allowed and normalizes to an empty string."""
    assert normalize_message({"role": "assistant", "content": None}).content == ""


def test_single_text_part_equals_plain_string() -> None:
    """A one-part list normalizes exactly like the same text sent as a string."""
    parts = [{"type": "text", "text": "Sure,  here it is."}]
    assert content_text(parts) == content_text("Sure, here it is.")


def test_text_parts_join_stably() -> None:
    """Several text parts join with single spaces; empty parts are skipped."""
    parts = [{"type": "text", "text": "a\nb"}, {"type": "text", "text": ""}, {"type": "text", "text": "c"}]
    assert content_text(parts) == "a b c"


def test_image_parts_are_placeholders_that_depend_on_the_image() -> None:
    """Image parts become stable placeholders carrying a hash of their url/data."""
    one = [{"type": "text", "text": "what is this"}, {"type": "image_url", "image_url": {"url": "data:1"}}]
    same = [{"type": "text", "text": "what is this"}, {"type": "image_url", "image_url": {"url": "data:1"}}]
    other = [{"type": "text", "text": "what is this"}, {"type": "image_url", "image_url": {"url": "data:2"}}]
    assert content_text(one) == content_text(same)
    assert content_text(one) != content_text(other)
    assert content_text(one).startswith("what is this [image_url:")
    assert "data:1" not in content_text(one)


def test_audio_parts_hash_their_data() -> None:
    """Audio parts hash their base64 data, not their format only."""
    a = [{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]
    b = [{"type": "input_audio", "input_audio": {"data": "BBBB", "format": "wav"}}]
    assert content_text(a).startswith("[input_audio:")
    assert content_text(a) != content_text(b)


def test_tool_call_arguments_are_canonical_json() -> None:
    """Argument key order and whitespace do not change the canonical tool calls."""
    a = [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1, "y": 2}'}}]
    b = [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"y":2,"x":1}'}}]
    c = [{"id": "call_2", "type": "function", "function": {"name": "f", "arguments": '{"y":2,"x":1}'}}]
    assert tool_calls_text(a) == tool_calls_text(b) != ""
    assert tool_calls_text(a) != tool_calls_text(c)


def test_tool_message_keeps_its_call_id() -> None:
    """Tool results carry the id of the call they answer."""
    msg = normalize_message({"role": "tool", "tool_call_id": "call_1", "content": '{"ok": true}'})
    assert msg.role == "tool" and msg.tool_call_id == "call_1" and msg.content == '{"ok": true}'


def test_sdk_objects_normalize_like_dicts() -> None:
    """OpenAI SDK (pydantic) messages and plain attribute objects equal their dict forms."""
    as_dict = {"role": "assistant", "content": "Hi there"}
    sdk = ChatCompletionMessage(role="assistant", content="Hi there")
    plain = SimpleNamespace(role="assistant", content="Hi there")
    assert normalize_message(sdk) == normalize_message(plain) == normalize_message(as_dict)


def test_normalize_messages_keeps_order() -> None:
    """A history normalizes message by message, in order."""
    out = normalize_messages([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    assert [m.role for m in out] == ["user", "assistant"]
    assert [m.content for m in out] == ["a", "b"]


def _words(n_chars: int) -> str:
    """Short words and mixed whitespace runs, ``n_chars`` long."""
    unit = "ab cd\n\t ef\u00a0gh  "
    return (unit * (n_chars // len(unit) + 1))[:n_chars]


def test_a_long_text_folds_exactly_like_a_short_one() -> None:
    """Past one fold block, words and whitespace runs cut by a block boundary fold as if whole."""
    from handoffmon.attribution.normalize import FOLD_BLOCK_CHARS, fold

    b = FOLD_BLOCK_CHARS
    texts = [
        "x" * (b - 2) + "word" + " tail",  # a word across the boundary
        "x" * (b - 1) + "  \n  " + "y",  # a whitespace run across it
        "x" * (b - 1) + " " + "y",  # the boundary right after the last word
        "x" * b + " y",  # ... right before the next one
        "  " + " " * (2 * b) + "lonely  ",  # whole blocks of whitespace
        "z" + " " * (2 * b) + "z",
        _words(3 * b + 17),
    ]
    for text in texts:
        assert fold(text) == " ".join(text.split())


def test_folding_a_long_text_holds_memory_in_proportion_to_its_characters() -> None:
    """A 4 MB reply of short words folds within 2x its size (a whole-text split held ~20x)."""
    import tracemalloc

    from handoffmon.attribution.normalize import fold

    text = _words(4_000_000)
    tracemalloc.start()
    try:
        folded = fold(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert folded.startswith("ab cd ef")
    assert peak < 2 * len(text)


def test_values_json_cannot_spell_are_chained_not_degraded() -> None:
    """A part nested past the recursion limit, one that holds itself, one whose keys do not
    sort (a Python caller's dict), tool-call arguments nested past the limit: each raised out
    of the digest and degraded the whole turn. Each digests stably now, and the reply after
    it is attributed by chain."""
    from handoffmon.attribution import Attributor
    from handoffmon.stores.memory import MemoryStore

    deep: dict[str, Any] = {}
    node = deep
    for _ in range(5_000):
        node["x"] = {}
        node = node["x"]
    looped: dict[str, Any] = {"type": "thing"}
    looped["self"] = looped
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "[" * 5_000 + "]" * 5_000}}
    odd_messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "thing", "payload": deep}]},
        {"role": "user", "content": [looped]},
        {"role": "user", "content": [{"type": "thing", 1: "one", "b": "two"}]},
        {"role": "assistant", "content": None, "tool_calls": [call]},
    ]
    errors: list[BaseException] = []
    for odd in odd_messages:
        attributor = Attributor(MemoryStore(), on_error=lambda _stage, exc: errors.append(exc))
        history: list[dict[str, Any]] = [odd, {"role": "user", "content": "hi"}]
        ctx = attributor.attribute(history)
        attributor.persist(attributor.record(ctx, "Hello!", ["m-a"]))
        history += [{"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "x"}]
        ctx = attributor.attribute(history)
        assert not ctx.degraded and errors == []
        assert [(a.author, a.method) for a in ctx.attributions][-1] == ("m-a", "chain")


def test_text_only_reads_any_part_type_without_raising() -> None:
    """A reply part whose ``type`` is a list (an upstream's odd JSON) made ``text_only`` raise,
    and with it ``record``: the reply went unrecorded. Such a part is not text."""
    from handoffmon.attribution.normalize import text_only

    reply = {
        "role": "assistant",
        "content": [{"type": ["text"], "text": "x"}, {"type": "text", "text": "ok"}],
    }
    assert text_only(reply) == {"role": "assistant", "content": "ok"}
    assert text_only({"role": "assistant", "content": [{"type": {}}, {"type": None}]}) is None
