"""Upstream URL handling and header filtering."""

from __future__ import annotations

import pytest

from handoffmon.proxy.upstream import request_headers, response_headers, split_base


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
