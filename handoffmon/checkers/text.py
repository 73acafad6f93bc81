"""General text checkers: regex, keywords, start/end phrases, letter case, commas."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

from handoffmon.checkers.base import (
    PASS,
    CheckContext,
    CheckFn,
    CheckOutcome,
    ParamError,
    Params,
    passed,
)
from handoffmon.checkers.safe_regex import ascii_literal_finder, clean_text, compile_safe, regex_cost

MAX_MIN_COUNT = 10_000
"""Largest ``min_count`` of ``regex_must_match``: matches are counted up to it, ~4 µs each in
RE2's wrapper (counting every ``.`` of a 1 MB reply took 4.4 s)."""


def _regex_flags(p: Params) -> dict[str, bool]:
    return {
        "ignore_case": p.bool("ignore_case", False),
        "multiline": p.bool("multiline", False),
        "dotall": p.bool("dotall", False),
    }


def regex_must_match(p: Params) -> CheckFn:
    """``pattern`` (RE2 syntax) must occur at least ``min_count`` times (default 1, at most 10,000).

    Params: pattern, ignore_case, multiline, dotall, min_count.
    """
    flags = _regex_flags(p)
    rx = compile_safe(p.str("pattern"), key="pattern", max_mem=p.limits.regex_max_mem, **flags)
    min_count = p.int("min_count", 1, min_value=1)
    if min_count > MAX_MIN_COUNT:
        raise ParamError("min_count", f"must be <= {MAX_MIN_COUNT}, got {min_count}")
    found_in = ascii_literal_finder(p.str("pattern"), ignore_case=flags["ignore_case"])
    p.set_cost(regex_cost(rx, key="pattern", max_ns=p.limits.max_cost_ns))

    def check(reply: str, ctx: CheckContext) -> CheckOutcome:
        text = clean_text(reply)
        if min_count == 1:
            if found_in is not None and text.isascii():  # RE2's answer without releasing the GIL
                return passed(found_in(text), "pattern_not_found")
            return passed(rx.search(text) is not None, "pattern_not_found")
        found = sum(1 for _ in itertools.islice(rx.finditer(text), min_count))  # ~4 µs a match
        return passed(found >= min_count, f"pattern_found_{found}_times")

    return check


def regex_must_not_match(p: Params) -> CheckFn:
    """``pattern`` (RE2 syntax) must not occur. Params: pattern, ignore_case, multiline, dotall."""
    flags = _regex_flags(p)
    rx = compile_safe(p.str("pattern"), key="pattern", max_mem=p.limits.regex_max_mem, **flags)
    found_in = ascii_literal_finder(p.str("pattern"), ignore_case=flags["ignore_case"])
    p.set_cost(regex_cost(rx, key="pattern", max_ns=p.limits.max_cost_ns))

    def check(reply: str, ctx: CheckContext) -> CheckOutcome:
        text = clean_text(reply)
        if found_in is not None and text.isascii():  # RE2's answer without releasing the GIL
            return passed(not found_in(text), "forbidden_pattern_found")
        return passed(rx.search(text) is None, "forbidden_pattern_found")

    return check


_LEAD = "(?:^|[^\\pL\\pN_])"
_TRAIL = "(?:[^\\pL\\pN_]|$)"


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _re2_escape(text: str) -> str:
    return "".join("\\" + c if not (c.isalnum() or c == "_" or ord(c) > 127) else c for c in text)


def phrase_pattern(phrase: str, *, whole_word: bool = True) -> str:
    """RE2 source matching ``phrase`` literally; with ``whole_word``, not inside a longer word.

    Word boundaries are Unicode-aware (letters, digits, ``_``), unlike RE2's ASCII ``\\b``,
    and apply only on a side where the phrase itself starts/ends with a word character.
    """
    body = _re2_escape(phrase)
    if not whole_word:
        return body
    return (_LEAD if _is_word_char(phrase[0]) else "") + body + (_TRAIL if _is_word_char(phrase[-1]) else "")


def any_phrase_regex(
    phrases: tuple[str, ...], *, key: str, case_sensitive: bool = False, whole_word: bool = True
) -> Any:
    """One RE2 alternation that matches wherever any of ``phrases`` occurs.

    With ``whole_word``, the phrases are grouped by which sides take a word boundary and each
    group's boundaries are written once around the group's alternation:
    ``L(?:a|b|…)T`` matches where ``LaT|LbT|…`` does, but repeating the Unicode boundary
    classes once per phrase makes a DFA too big for RE2's memory budget, and RE2 then falls
    back to its NFA: 150 keywords took 17 s per MB of non-ASCII text, against 3 ms grouped.
    """
    if not whole_word:
        source = "|".join(f"(?:{_re2_escape(ph)})" for ph in phrases)
        return compile_safe(source, key=key, ignore_case=not case_sensitive)
    groups: dict[tuple[bool, bool], list[str]] = {}
    for ph in phrases:
        groups.setdefault((_is_word_char(ph[0]), _is_word_char(ph[-1])), []).append(_re2_escape(ph))
    source = "|".join(
        (_LEAD if lead else "") + "(?:" + "|".join(bodies) + ")" + (_TRAIL if trail else "")
        for (lead, trail), bodies in groups.items()
    )
    return compile_safe(source, key=key, ignore_case=not case_sensitive)


def phrase_prefilter(phrases: tuple[str, ...], *, case_sensitive: bool) -> Any:
    """``may_match(text)``: False only when :func:`any_phrase_regex` of ``phrases`` cannot match
    ``text``, because none of them occurs in it even as a plain substring (a phrase's pattern
    is the phrase escaped, with boundaries around it: the substring is necessary).

    A reply with no keyword in it, the common case, is then answered without RE2, whose Python
    binding releases the GIL on every match (~40 µs of thread CPU in a busy process). Without
    ``case_sensitive`` the substring test compares lower-cased ASCII, which is RE2's case folding
    there (the other fold partners of ASCII letters, the Kelvin sign and long s, are not ASCII):
    a non-ASCII phrase disables the filter, a non-ASCII text always may match.
    """
    compared, fold = _substring_view(phrases, case_sensitive=case_sensitive)

    def may_match(text: str) -> bool:
        folded = fold(text)
        return folded is None or any(ph in folded for ph in compared)

    return may_match


def _substring_view(
    phrases: tuple[str, ...], *, case_sensitive: bool
) -> tuple[tuple[str, ...], Callable[[str], str | None]]:
    """The substring test :func:`phrase_prefilter` and :func:`_candidates` share: the phrases as
    compared, and ``fold(text)``, the text to look for them in, or ``None`` when every phrase
    may occur (a non-ASCII phrase or text without ``case_sensitive``)."""
    if case_sensitive:
        return phrases, _same
    if not all(ph.isascii() for ph in phrases):
        return phrases, _nothing_folded
    return tuple(ph.lower() for ph in phrases), _ascii_lower


def _same(text: str) -> str:
    return text


def _nothing_folded(text: str) -> None:
    return None


def _ascii_lower(text: str) -> str | None:
    return text.lower() if text.isascii() else None


MAX_PASS_MATCHES = 64
"""Matches one pass of :func:`phrases_present` reads before it starts a pass without the phrases
found so far (a reply repeating one keyword would otherwise cost an RE2 call per repetition)."""


@functools.lru_cache(maxsize=32)
def _tagged_alternation(
    phrases: tuple[str, ...], case_sensitive: bool, whole_word: bool
) -> tuple[Any, tuple[int, ...]]:
    """:func:`any_phrase_regex` with each phrase in a capture group, and which phrase (its
    index) each group is. Cached: the same keywords in another rule, or a later turn's
    remaining keywords, compile once (32 sets: one of 150 keywords holds ~0.4 MB once used)."""
    groups: dict[tuple[bool, bool], list[int]] = {}
    for i, ph in enumerate(phrases):
        edges = (_is_word_char(ph[0]), _is_word_char(ph[-1])) if whole_word else (False, False)
        groups.setdefault(edges, []).append(i)
    order = tuple(i for members in groups.values() for i in members)
    source = "|".join(
        (_LEAD if lead else "")
        + "(?:"
        + "|".join(f"({_re2_escape(phrases[i])})" for i in members)
        + ")"
        + (_TRAIL if trail else "")
        for (lead, trail), members in groups.items()
    )
    return compile_safe(source, key="keywords", ignore_case=not case_sensitive), order


def _scan(rx: Any, order: tuple[int, ...], data: bytes) -> set[int]:
    """The phrases (indices) one pass over ``data`` (UTF-8) finds, at most ``MAX_PASS_MATCHES``
    matches. Bytes, not ``str``: RE2's wrapper encodes a ``str`` again at every call (210 µs a
    search of 12 kB).

    Each search resumes at the match's last character: the boundary a match consumes after its
    phrase can be the boundary before the next one (``cat dog``)."""
    found: set[int] = set()
    pos = 0
    for _ in range(MAX_PASS_MATCHES):
        m = rx.search(data, pos)
        if m is None:
            break
        found.add(order[m.lastindex - 1])
        start, last = m.start(), m.end() - 1
        while last > start and data[last] & 0xC0 == 0x80:  # back to the character's first byte
            last -= 1
        pos = max(start + 1, last)
    return found


def phrases_present(
    text: str,
    phrases: tuple[str, ...],
    candidates: list[int],
    *,
    case_sensitive: bool,
    whole_word: bool,
) -> set[int]:
    """Which ``phrases`` (indices) occur in ``text``, as a search of each one's own pattern would
    say, with one alternation per pass instead of one pattern per phrase (compiling 150 patterns,
    each with its Unicode boundary classes, took 0.24-0.58 s).

    ``candidates``: the phrases that may occur (the others are not looked for). A pass reports
    one phrase per match, so a phrase can be hidden behind another at the same place (``new``
    inside ``new york``) or one overlapping it; the next pass looks only for the phrases not found
    yet, and passes stop when one finds nothing: what is left does not occur."""
    found: set[int] = set()
    left = candidates
    data = text.encode("utf-8") if left else b""
    while left:
        rx, order = _tagged_alternation(tuple(phrases[i] for i in left), case_sensitive, whole_word)
        new = {left[j] for j in _scan(rx, order, data)}
        if not new:
            break
        found |= new
        left = [i for i in left if i not in new]
    return found


def _candidates(phrases: tuple[str, ...], *, case_sensitive: bool) -> Any:
    """``candidates(text)``: the phrases (indices) that may occur in ``text``, by the substring
    test of :func:`phrase_prefilter`, the text folded once for all of them."""
    everything = list(range(len(phrases)))
    compared, fold = _substring_view(phrases, case_sensitive=case_sensitive)

    def candidates(text: str) -> list[int]:
        folded = fold(text)
        if folded is None:
            return everything
        return [i for i, ph in enumerate(compared) if ph in folded]

    return candidates


def _alternation_cost(keywords: tuple[str, ...]) -> float:
    """Worst ns per character of one alternation: the prefilter scans once per keyword
    (100 keywords: 80 ns per character of ASCII words)."""
    return max(30.0, 1.5 * len(keywords))


def _keyword_params(p: Params) -> tuple[tuple[str, ...], bool, bool]:
    return p.str_list("keywords"), p.bool("case_sensitive", False), p.bool("whole_word", True)


def keywords_present(p: Params) -> CheckFn:
    """Keywords must appear. Params: keywords, require (``all``|``any``), case_sensitive, whole_word."""
    keywords, case_sensitive, whole_word = _keyword_params(p)
    require = p.choice("require", ("all", "any"), "all")
    if require == "any":
        rx = any_phrase_regex(keywords, key="keywords", case_sensitive=case_sensitive, whole_word=whole_word)
        may_match = phrase_prefilter(keywords, case_sensitive=case_sensitive)
        p.set_cost(_alternation_cost(keywords))

        def check_any(reply: str, ctx: CheckContext) -> CheckOutcome:
            text = clean_text(reply)
            return passed(may_match(text) and rx.search(text) is not None, "no_keyword_found")

        return check_any
    _tagged_alternation(keywords, case_sensitive, whole_word)  # a bad keyword fails at load
    candidates = _candidates(keywords, case_sensitive=case_sensitive)
    p.set_cost(max(30, 10 * len(keywords)))  # a substring test per keyword, then RE2 passes

    def check_all(reply: str, ctx: CheckContext) -> CheckOutcome:
        text = clean_text(reply)
        found = phrases_present(
            text, keywords, candidates(text), case_sensitive=case_sensitive, whole_word=whole_word
        )
        missing = len(keywords) - len(found)
        return passed(missing == 0, f"missing_{missing}_of_{len(keywords)}_keywords")

    return check_all


def keywords_absent(p: Params) -> CheckFn:
    """None of the keywords may appear. Params: keywords, case_sensitive, whole_word."""
    keywords, case_sensitive, whole_word = _keyword_params(p)
    rx = any_phrase_regex(keywords, key="keywords", case_sensitive=case_sensitive, whole_word=whole_word)
    may_match = phrase_prefilter(keywords, case_sensitive=case_sensitive)
    p.set_cost(_alternation_cost(keywords))

    def check(reply: str, ctx: CheckContext) -> CheckOutcome:
        text = clean_text(reply)
        return passed(not may_match(text) or rx.search(text) is None, "forbidden_keyword_found")

    return check


def _phrase_params(p: Params, key: str) -> tuple[str, bool, bool]:
    phrase = p.str(key)
    case_sensitive = p.bool("case_sensitive", True)
    strip = p.bool("strip", True)
    return (phrase if case_sensitive else phrase.casefold()), case_sensitive, strip


def starts_with(p: Params) -> CheckFn:
    """The reply starts with ``prefix``. Params: prefix, case_sensitive (true), strip (true)."""
    prefix, case_sensitive, strip = _phrase_params(p, "prefix")

    def check(reply: str, ctx: CheckContext) -> CheckOutcome:
        head = reply.lstrip() if strip else reply
        head = head[: len(prefix) * 3] if not case_sensitive else head
        return passed((head if case_sensitive else head.casefold()).startswith(prefix), "wrong_start")

    return check


def ends_with(p: Params) -> CheckFn:
    """The reply ends with ``suffix``. Params: suffix, case_sensitive (true), strip (true)."""
    suffix, case_sensitive, strip = _phrase_params(p, "suffix")

    def check(reply: str, ctx: CheckContext) -> CheckOutcome:
        tail = reply.rstrip() if strip else reply
        tail = tail[-len(suffix) * 3 :] if not case_sensitive else tail
        return passed((tail if case_sensitive else tail.casefold()).endswith(suffix), "wrong_end")

    return check


def letter_case(p: Params) -> CheckFn:
    """Every cased letter is ``lower`` or ``upper`` case; no letters → not_applicable. Params: case."""
    case = p.choice("case", ("lower", "upper"))

    def check(reply: str, ctx: CheckContext) -> CheckOutcome:
        if case == "lower":
            if reply.islower():
                return PASS
            return CheckOutcome("fail", "uppercase_found") if reply.lower() != reply else _no_letters()
        if reply.isupper():
            return PASS
        return CheckOutcome("fail", "lowercase_found") if reply.upper() != reply else _no_letters()

    return check


def _no_letters() -> CheckOutcome:
    return CheckOutcome("not_applicable", "no_cased_letters")


def no_commas(p: Params) -> CheckFn:
    """The reply contains no comma (``,``; with ``include_fullwidth`` also ``，`` and ``、``)."""
    chars = ",，、" if p.bool("include_fullwidth", False) else ","

    def check(reply: str, ctx: CheckContext) -> CheckOutcome:
        return passed(not any(c in reply for c in chars), "comma_found")

    return check


def require_one_of(p: Params, *keys: str) -> None:
    """Raise unless at least one of ``keys`` was given."""
    if not any(p.has(k) for k in keys):
        raise ParamError(keys[0], f"give at least one of {', '.join(keys)}")
