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


def test_an_entry_naming_the_group_as_a_later_key_is_another_groups_and_kept() -> None:
    """litellm reads only an entry's first key: ``{"q": [...], "p": [...]}`` (a YAML list item
    holding two groups) is q's entry. Reordering p's fallbacks (from ``*``) dropped it, so q lost
    its fallbacks for the rest of the request (nested hops)."""
    fb = [{"q": ["x", "y"], "p": ["b"]}, {"*": ["b", "c"]}]
    assert reordered(fb, "p", ["c", "b"]) == [{"p": ["c", "b"]}, *fb]


def test_only_the_entry_litellm_reads_is_replaced() -> None:
    """Of two entries for p, litellm reads the first; the second stays (litellm's name matches of
    other groups, such as openai/p's, take the last one)."""
    fb = [{"p": ["b", "c"]}, {"p": ["d"]}]
    assert reordered(fb, "p", ["c", "b"]) == [{"p": ["c", "b"]}, {"p": ["d"]}]


def test_reordering_never_adds_or_drops_another_groups_fallbacks() -> None:
    """Seeded random lists in litellm's dict shape (``*``, provider-prefixed names, several keys
    per entry, duplicates): after reordering the requested group's candidates, litellm's own
    lookup gives that order for the group, and every other group the same fallbacks as before, in
    a permutation at most. Not checked: the group's aliases (openai/p, azure/p for p), which
    litellm may match to the group's new entry by its stripped name and so see its fallbacks."""
    import random

    import pytest

    pytest.importorskip("litellm")
    from handoffmon.integrations.router_routing import fallback_groups

    rng = random.Random(11)
    keys = ["a", "b", "c", "openai/a", "gpt-4o", "openai/gpt-4o", "*"]
    names = ["a", "b", "c", "d", "x", "y", "openai/a", "gpt-4o", "openai/gpt-4o", "azure/gpt-4o", "z"]
    reordered_lists = 0
    for _ in range(3000):
        fb = [
            {k: rng.sample(names[:6], rng.randint(0, 3)) for k in rng.sample(keys, rng.randint(1, 2))}
            for _ in range(rng.randint(1, 4))
        ]
        group = rng.choice(names)
        cands = fallback_groups(fb, group)
        if len(cands) < 2:
            continue
        order = rng.sample(cands, len(cands))
        out = reordered(fb, group, order)
        reordered_lists += 1
        assert list(fallback_groups(out, group)) == order, (fb, group)
        for other in names:
            if other.rsplit("/", 1)[-1] != group.rsplit("/", 1)[-1]:
                assert sorted(fallback_groups(out, other)) == sorted(fallback_groups(fb, other)), (
                    fb,
                    group,
                    other,
                )
    assert reordered_lists > 500
