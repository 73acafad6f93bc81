"""litellm's two fallback shapes without litellm: the groups to order and the rewritten list."""

from __future__ import annotations

from handoffmon.routing.fallbacks import entry_groups, is_plain, reordered


def test_entry_groups_in_both_shapes() -> None:
    """Own entry first, else '*'; a plain list is itself; parameter dicts and junk give ()."""
    fb = [{"*": ["z"]}, {"p": ["b", "c"]}]
    assert entry_groups(fb, "p") == ("b", "c")
    assert entry_groups(fb, "q") == ("z",)
    assert entry_groups(["b", "c"], "p") == ("b", "c")
    assert entry_groups([{"model": "b", "temperature": 0.1}], "p") == ()
    assert entry_groups([{"q": ["b"]}], "p") == ()
    assert entry_groups("b", "p") == () and entry_groups(None, "p") == () and entry_groups([], "p") == ()


def test_reordered_touches_only_the_requested_group() -> None:
    fb = [{"q": ["c"]}, {"p": ["b", "c"]}, {"*": ["z"]}]
    out = reordered(fb, "p", ["c", "b"])
    assert out == [{"p": ["c", "b"]}, {"q": ["c"]}, {"*": ["z"]}]
    assert fb == [{"q": ["c"]}, {"p": ["b", "c"]}, {"*": ["z"]}]  # the input is not changed
    assert reordered(["b", "c"], "p", ["c", "b"]) == ["c", "b"]
    assert is_plain(["b"]) and not is_plain([]) and not is_plain([{"p": ["b"]}])
