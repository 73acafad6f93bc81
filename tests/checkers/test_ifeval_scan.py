"""The linear scanners equal the reference regexes (random strings) and stay linear (hostile ones)."""

from __future__ import annotations

import re
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from handoffmon.checkers.ifeval.scan import count_bullets, count_placeholders, has_title

TEXT = st.text(alphabet=list("*-[]<>a \n\t\x0b\u2003"), max_size=40)


def ref_placeholders(v: str) -> int:
    return len(re.findall(r"\[.*?\]", v))


def ref_bullets(v: str) -> int:
    return len(re.findall(r"^\s*\*[^\*].*$", v, flags=re.MULTILINE)) + len(
        re.findall(r"^\s*-.*$", v, flags=re.MULTILINE)
    )


def ref_title(v: str) -> bool:
    return any(t.lstrip("<").rstrip(">").strip() for t in re.findall(r"<<[^\n]+>>", v))


@settings(max_examples=3000, deadline=None)
@given(TEXT)
def test_scanners_equal_reference_regexes(text: str) -> None:
    """Same placeholder count, bullet count and title verdict as the reference's regexes."""
    assert count_placeholders(text) == ref_placeholders(text)
    assert count_bullets(text) == ref_bullets(text)
    assert has_title(text) == ref_title(text)


def test_known_cases() -> None:
    """Spot checks, including matches that run across a newline like the regex does."""
    assert count_bullets("* a\n- b\n  * c\n** no\n*\n\n-") == 5  # "*\n" and "\n-" match too
    assert count_bullets("\n\n\n* a") == 1
    assert count_placeholders("[a] [b\n] [c]") == 2
    assert has_title("x <<Poem>> y") and not has_title("<< >>") and not has_title("<<\n>>")


def test_scanners_are_linear_on_hostile_input() -> None:
    """200,000 '[' / newlines / '<' — quadratic for the regexes — take well under a second."""
    n = 200_000
    start = time.process_time()
    assert count_placeholders("[" * n) == 0
    assert count_bullets("\n" * n + "x") == 0
    assert count_bullets(" \n" * n) == 0
    assert not has_title("<" * n + "x")
    assert time.process_time() - start < 1.0


@settings(max_examples=1500, deadline=None)
@given(st.text(alphabet=list("pPsS. \n\tx"), max_size=30))
def test_postscript_pattern_equals_reference(text: str) -> None:
    """Dropping the reference's leading \\s* and trailing .*$ does not change any verdict."""
    from handoffmon.checkers.ifeval.instructions import build_instruction

    for marker, ref in (("P.S.", r"\s*p\.\s?s\..*$"), ("P.P.S", r"\s*p\.\s?p\.\s?s.*$")):
        expected = bool(re.findall(ref, text.lower(), flags=re.MULTILINE))
        check = build_instruction("detectable_content:postscript", {"postscript_marker": marker})
        assert check(text) == expected
