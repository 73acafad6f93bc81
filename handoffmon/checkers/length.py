"""Length bounds: characters, words, sentences, paragraphs, bullet items."""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable

from handoffmon.checkers.base import CheckContext, CheckFn, CheckOutcome, ParamError, Params, passed

_WORD = re.compile(r"\w+")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n")
_BULLET = re.compile(
    r"^(?![ \t]*([*\-_])(?:[ \t]*\1){2,}[ \t]*$)[ \t]*(?:[*\-+•‣◦▪]|\d{1,9}[.)])[ \t]+\S", re.MULTILINE
)
"""A list item's first line; not a thematic break (``* * *``, ``- - -``), which CommonMark
reads first."""
_FENCE = re.compile(r"^[ \t]{0,3}(?:```|~~~)[^\n]*", re.MULTILINE)


def count_chars(text: str) -> int:
    """Characters (code points), surrounding whitespace excluded."""
    return len(text.strip())


def count_words(text: str, limit: int | None = None) -> int:
    """``\\w+`` tokens, the IFEval definition; stops counting at ``limit`` when given."""
    if limit is None:
        return len(_WORD.findall(text))
    return sum(1 for _ in itertools.islice(_WORD.finditer(text), limit))


def count_sentences(text: str) -> int:
    """Sentences as NLTK's English Punkt model splits them (see ``ifeval.sentences``)."""
    from handoffmon.checkers.ifeval.sentences import count_sentences as punkt_count

    return punkt_count(text)


def count_paragraphs(text: str) -> int:
    """Non-blank blocks separated by one or more blank lines."""
    return sum(1 for block in _PARAGRAPH_BREAK.split(text) if block.strip())


def count_bullets(text: str) -> int:
    """Lines that start a markdown bullet (``*``, ``-``, ``+``, ``•``) or a numbered item (``1.``, ``2)``),
    outside fenced code blocks (an unclosed fence runs to the end, as in CommonMark) and
    other than thematic breaks."""
    if "```" not in text and "~~~" not in text:
        return sum(1 for _ in _BULLET.finditer(text))
    total, start, inside = 0, 0, False
    for fence in _FENCE.finditer(text):
        if not inside:
            total += sum(1 for _ in _BULLET.finditer(text, start, fence.start()))
        inside, start = not inside, fence.end()
    if not inside:
        total += sum(1 for _ in _BULLET.finditer(text, start))
    return total


COUNTERS: dict[str, Callable[[str], int]] = {
    "chars": count_chars,
    "words": count_words,
    "sentences": count_sentences,
    "paragraphs": count_paragraphs,
    "bullets": count_bullets,
}


COSTS: dict[str, float] = {"chars": 5, "words": 30, "sentences": 5500, "paragraphs": 15, "bullets": 140}
"""Worst CPU nanoseconds per character of each counter (``CheckerSpec.cost``), measured on
1 MB hostile shapes (``a. a. a.`` for Punkt sentences, a fence every other line for
bullets), rounded up by half."""


def length(p: Params) -> CheckFn:
    """``min`` ≤ count of ``unit`` ≤ ``max`` (inclusive; give either or both).

    Params: unit (chars, words, sentences, paragraphs, bullets), min, max.
    """
    unit = p.choice("unit", tuple(COUNTERS))
    lo = p.int("min", None, min_value=0)
    hi = p.int("max", None, min_value=0)
    if lo is None and hi is None:
        raise ParamError("min", "give min, max or both")
    if lo is not None and hi is not None and lo > hi:
        raise ParamError("max", f"max ({hi}) is below min ({lo})")
    counter = COUNTERS[unit]
    p.set_cost(COSTS[unit])
    if unit == "sentences":  # import the splitter at load, not on the first checked reply
        from handoffmon.checkers.ifeval import sentences  # noqa: F401
    if unit == "words":  # knowing the count is past every bound is enough: stop there
        counter = functools.partial(count_words, limit=(hi + 1) if hi is not None else lo)

    def check(reply: str, ctx: CheckContext) -> CheckOutcome:
        n = counter(reply)
        if lo is not None and n < lo:
            return CheckOutcome("fail", f"too_few_{unit}")
        return passed(hi is None or n <= hi, f"too_many_{unit}")

    return check
