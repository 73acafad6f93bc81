"""Pins where caller conversation ids are read from, and in which order."""

from __future__ import annotations

from handoffmon.ingress import caller_conversation_id


def test_header_is_case_insensitive() -> None:
    """X-Conversation-Id is found whatever its capitalization."""
    assert caller_conversation_id(headers={"X-Conversation-ID": " abc "}) == "abc"


def test_configured_header_wins() -> None:
    """The configured header is read before the standard ones."""
    headers = {"x-conversation-id": "std", "X-Chat": "mine"}
    assert caller_conversation_id(headers=headers, header_name="x-chat") == "mine"


def test_litellm_session_header() -> None:
    """LiteLLM's session header identifies the conversation."""
    assert caller_conversation_id(headers={"x-litellm-session-id": "s1"}) == "s1"


def test_metadata_keys_in_order() -> None:
    """conversation_id, session_id, litellm_session_id, gen_ai.conversation.id, nested metadata."""
    assert caller_conversation_id(metadata={"session_id": "s", "conversation_id": "c"}) == "c"
    assert caller_conversation_id(metadata={"litellm_session_id": "l"}) == "l"
    assert caller_conversation_id(metadata={"gen_ai.conversation.id": "o"}) == "o"
    assert caller_conversation_id(metadata={"metadata": {"session_id": "nested"}}) == "nested"


def test_headers_before_metadata_and_none_when_absent() -> None:
    """Headers take precedence; with nothing given there is no caller id."""
    assert caller_conversation_id(headers={"x-conversation-id": "h"}, metadata={"session_id": "m"}) == "h"
    assert caller_conversation_id(headers={"x-other": "1"}, metadata={"user": "u"}) is None
    assert caller_conversation_id() is None


def test_session_parameter_takes_the_litellm_session_id_place() -> None:
    """LiteLLM's litellm_session_id parameter beats a metadata key of that name, not the keys before it."""
    assert caller_conversation_id(metadata={"litellm_session_id": "meta"}, session_id="param") == "param"
    assert caller_conversation_id(metadata={"session_id": "s"}, session_id="param") == "s"
    assert caller_conversation_id(metadata={"gen_ai.conversation.id": "o"}, session_id="param") == "param"
    assert caller_conversation_id(session_id="param") == "param"
    assert caller_conversation_id(headers={"x-conversation-id": "h"}, session_id="param") == "h"


def test_blank_and_oversized_ids() -> None:
    """Blank ids are ignored; very long ids are truncated to 256 bytes (ASCII: characters)."""
    assert caller_conversation_id(headers={"x-conversation-id": "  "}, metadata={"session_id": "m"}) == "m"
    long_id = caller_conversation_id(headers={"x-conversation-id": "x" * 1000})
    assert long_id is not None and len(long_id) == 256


def test_long_ids_are_cut_at_256_utf8_bytes_between_characters() -> None:
    """A non-ASCII id is cut by its UTF-8 size, never inside a character: a 256-character
    emoji id was 1 KB in every stored attribution value."""
    for unit, chars in (("ü🙂", 85), ("🙂", 64), ("ü", 128), ("aü", 171), ("é🙂x", 109)):
        cut = caller_conversation_id(headers={"x-conversation-id": unit * 300})
        assert cut is not None and len(cut.encode("utf-8")) <= 256
        assert len(cut) == chars and (unit * 300).startswith(cut)
    assert caller_conversation_id(metadata={"session_id": "ü" * 128}) == "ü" * 128  # exactly 256 bytes
    lone = caller_conversation_id(metadata={"session_id": "\ud800" * 200})
    assert lone == "\\ud800" * 42 + "\\ud8"  # escaped (see below), then cut at 256 bytes


def test_an_id_holding_a_lone_surrogate_is_exportable_and_stays_distinct() -> None:
    """JSON lets a client send ``"\\ud800"``; the id reaches OpenMetrics exemplars, where one
    lone surrogate made every scrape raise UnicodeEncodeError. It is spelled as its escape:
    valid UTF-8, and two such ids stay two ids."""
    from prometheus_client import CollectorRegistry, Counter
    from prometheus_client.openmetrics.exposition import generate_latest

    ids = [
        caller_conversation_id(metadata={"conversation_id": f"conv-{c}"}) for c in ("\ud800", "\udfff", "ü")
    ]
    assert ids == ["conv-\\ud800", "conv-\\udfff", "conv-ü"]
    registry = CollectorRegistry()
    turns = Counter("turns", "turns", ["n"], registry=registry)
    for n, cid in enumerate(ids):
        assert cid is not None
        turns.labels(str(n)).inc(exemplar={"conversation_id": cid})
    assert b'conversation_id="conv-\\\\ud800"' in generate_latest(registry)
