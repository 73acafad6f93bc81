"""Length bounds in characters, words, sentences, paragraphs and bullet items."""

from __future__ import annotations

import pytest

from handoffmon.checkers import CheckContext, ParamError, default_registry
from handoffmon.checkers.length import count_bullets, count_paragraphs, count_words

REG = default_registry()


def verdict(reply: str, **params: object) -> str:
    return REG.build("length", params)(reply, CheckContext()).verdict


def test_counters() -> None:
    """Words are \\w+ tokens; paragraphs are blank-line separated; bullets are list markers."""
    assert count_words("Hello, world! It's 2024.") == 5
    assert count_paragraphs("a\n\nb\n \n\nc\n") == 3
    assert count_paragraphs("   ") == 0
    assert count_bullets("* a\n- b\n+ c\n1. d\n2) e\n**bold**\n-not a bullet\n") == 5


def test_bounds_are_inclusive() -> None:
    """min ≤ n ≤ max, each optional."""
    assert verdict("one two three", unit="words", min=3, max=3) == "pass"
    assert verdict("one two", unit="words", min=3) == "fail"
    assert verdict("one two three four", unit="words", max=3) == "fail"
    assert verdict("abc", unit="chars", max=3) == "pass"
    assert verdict("First one. Second one! Third?", unit="sentences", min=3, max=3) == "pass"
    assert verdict("p1\n\np2", unit="paragraphs", min=3) == "fail"
    assert verdict("- a\n- b", unit="bullets", max=1) == "fail"


def test_bad_bounds_fail_at_build() -> None:
    """No bound, max < min, and unknown units are rejected naming the key."""
    with pytest.raises(ParamError) as e:
        REG.build("length", {"unit": "words"})
    assert e.value.key == "min"
    with pytest.raises(ParamError) as e:
        REG.build("length", {"unit": "words", "min": 5, "max": 2})
    assert e.value.key == "max"
    with pytest.raises(ParamError) as e:
        REG.build("length", {"unit": "tokens", "max": 2})
    assert e.value.key == "unit"


@pytest.mark.parametrize(
    ("reply", "bullets"),
    [
        ("* * *\n", 0),  # thematic breaks, which CommonMark reads before list items
        ("- - -", 0),
        ("  *   *  *  ", 0),
        ("* a\n* * *\n- b", 2),
        ("* item\n```\n- code\n* code\n```\n- after", 2),  # not the lines of a code block
        ("~~~python\n* x\n~~~\n* y", 1),
        ("```\n- never closed", 0),
        ("* a\n  - b\n1) c\n2. d", 4),
    ],
)
def test_bullets_skip_thematic_breaks_and_code_blocks(reply: str, bullets: int) -> None:
    """``* * *`` is a rule, not an item; a ``- x`` line inside a fenced code block is code."""
    assert count_bullets(reply) == bullets
    check = REG.build("length", {"unit": "bullets", "min": bullets, "max": bullets})
    assert check(reply, CheckContext()).verdict == "pass"
