"""General text checkers: regex, keywords, start/end phrases, letter case, commas."""

from __future__ import annotations

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
from handoffmon.checkers.safe_regex import clean_text, compile_safe


def _regex_flags(p: Params) -> dict[str, bool]:
    return {
        "ignore_case": p.bool("ignore_case", False),
        "multiline": p.bool("multiline", False),
        "dotall": p.bool("dotall", False),
    }


def regex_must_match(p: Params) -> CheckFn:
    """``pattern`` (RE2 syntax) must occur at least ``min_count`` times (default 1).

    Params: pattern, ignore_case, multiline, dotall, min_count.
    """
    rx = compile_safe(p.str("pattern"), key="pattern", **_regex_flags(p))
    min_count = p.int("min_count", 1, min_value=1)

    def check(reply: str, ctx: CheckContext) -> CheckOutcome:
        text = clean_text(reply)
        if min_count == 1:
            return passed(rx.search(text) is not None, "pattern_not_found")
        found = sum(1 for _ in rx.finditer(text))
        return passed(found >= min_count, f"pattern_found_{found}_times")

    return check


def regex_must_not_match(p: Params) -> CheckFn:
    """``pattern`` (RE2 syntax) must not occur. Params: pattern, ignore_case, multiline, dotall."""
    rx = compile_safe(p.str("pattern"), key="pattern", **_regex_flags(p))

    def check(reply: str, ctx: CheckContext) -> CheckOutcome:
        return passed(rx.search(clean_text(reply)) is None, "forbidden_pattern_found")

    return check


def _keyword_regex(keywords: tuple[str, ...], *, case_sensitive: bool, whole_word: bool) -> Any:
    parts = []
    for kw in keywords:
        body = _re2_escape(kw)
        if whole_word:
            # \b only where the keyword itself starts/ends with a word character
            body = ("\\b" if _is_word_char(kw[0]) else "") + body + ("\\b" if _is_word_char(kw[-1]) else "")
        parts.append(body)
    return compile_safe("(" + "|".join(parts) + ")", key="keywords", ignore_case=not case_sensitive)


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _re2_escape(text: str) -> str:
    return "".join("\\" + c if not (c.isalnum() or c == "_" or ord(c) > 127) else c for c in text)


def _keyword_params(p: Params) -> tuple[tuple[str, ...], bool, Any]:
    keywords = p.str_list("keywords")
    case_sensitive = p.bool("case_sensitive", False)
    whole_word = p.bool("whole_word", True)
    return keywords, case_sensitive, _keyword_regex(keywords, case_sensitive=case_sensitive,
                                                   whole_word=whole_word)


def keywords_present(p: Params) -> CheckFn:
    """Keywords must appear. Params: keywords, require (``all``|``any``), case_sensitive, whole_word."""
    keywords, case_sensitive, rx = _keyword_params(p)
    require = p.choice("require", ("all", "any"), "all")
    wanted = {k if case_sensitive else k.casefold() for k in keywords}

    def check(reply: str, ctx: CheckContext) -> CheckOutcome:
        text = clean_text(reply)
        if require == "any":
            return passed(rx.search(text) is not None, "no_keyword_found")
        found = {m if case_sensitive else m.casefold() for m in rx.findall(text)}
        missing = len(wanted - found)
        return passed(missing == 0, f"missing_{missing}_of_{len(wanted)}_keywords")

    return check


def keywords_absent(p: Params) -> CheckFn:
    """None of the keywords may appear. Params: keywords, case_sensitive, whole_word."""
    _, _, rx = _keyword_params(p)

    def check(reply: str, ctx: CheckContext) -> CheckOutcome:
        return passed(rx.search(clean_text(reply)) is None, "forbidden_keyword_found")

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
