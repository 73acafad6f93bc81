"""Authorship from upstream response headers, and upstream URL handling."""

from __future__ import annotations

import pytest

from handoffmon.proxy.authorship import UpstreamAuthorship, from_headers, usage_tokens
from handoffmon.proxy.upstream import request_headers, response_headers, split_base


def test_litellm_headers_are_read_case_insensitively() -> None:
    """x-litellm-model-id/-name/-attempted-fallbacks/-retries, any case; junk counts become 0."""
    raw = [
        (b"X-LiteLLM-Model-Id", b"dep-7"),
        (b"x-litellm-model-name", b"azure/gpt-4o"),
        (b"x-litellm-attempted-fallbacks", b"2"),
        (b"x-litellm-attempted-retries", b"nope"),
        (b"content-type", b"application/json"),
    ]
    assert from_headers(raw) == UpstreamAuthorship("azure/gpt-4o", "dep-7", 2, 0)


def test_author_precedence() -> None:
    """Mapped deployment id first, then the deployment model name, then the body's model."""
    who = UpstreamAuthorship("azure/gpt-4o", "dep-7")
    assert who.authors("gpt-4o-2024", {"dep-7": "gpt4o"}) == ["dep-7"]
    assert who.authors("gpt-4o-2024", {}) == ["azure/gpt-4o"]
    assert UpstreamAuthorship().authors("gpt-4o-2024", {}) == ["gpt-4o-2024"]
    assert UpstreamAuthorship().authors(None, {}) == []


def test_usage_tokens() -> None:
    """Token counts only when they are ints."""
    assert usage_tokens({"prompt_tokens": 3, "completion_tokens": 4}) == (3, 4)
    assert usage_tokens({"prompt_tokens": "3"}) == (None, None)
    assert usage_tokens(None) == (None, None)


def test_split_base_drops_trailing_v1() -> None:
    """``…/v1`` and the bare origin mean the same upstream; a path prefix is kept."""
    assert split_base("http://r:4000") == ("http://r:4000", "")
    assert split_base("http://r:4000/v1/") == ("http://r:4000", "")
    assert split_base("https://gw.example/openai/v1") == ("https://gw.example", "/openai")
    with pytest.raises(ValueError):
        split_base("r:4000")


def test_hop_by_hop_headers_are_dropped_auth_kept() -> None:
    """Connection-scoped headers never cross the proxy; auth and everything else do."""
    up = request_headers(
        [
            (b"host", b"p"),
            (b"connection", b"keep-alive"),
            (b"authorization", b"Bearer k"),
            (b"content-length", b"3"),
        ]
    )
    assert up == [("authorization", "Bearer k")]
    down = response_headers(
        [(b"Transfer-Encoding", b"chunked"), (b"set-cookie", b"a"), (b"set-cookie", b"b")]
    )
    assert down == [(b"set-cookie", b"a"), (b"set-cookie", b"b")]
