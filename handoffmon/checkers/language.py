"""Reply language: py3langid's model (shipped in its wheel), loaded once and lazily, scored vectorized."""

from __future__ import annotations

import functools
import re
import unicodedata

from handoffmon.checkers.base import PASS, CheckContext, CheckFn, CheckOutcome, ParamError, Params

NO_LANGUAGE = "zxx"
"""The model's label for text with no linguistic content (emoji, symbols)."""


@functools.cache
def invisible() -> re.Pattern[str]:
    """Unicode format characters (category Cf: zero-width spaces and joiners, bidi controls,
    the byte-order mark, soft hyphens): invisible to a reader, but they split the byte n-grams
    the model reads, so English with a zero-width space in each word scored below 0.5."""
    chars = "".join(chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf")
    return re.compile(f"[{re.escape(chars)}]+")


def warm() -> None:
    """Load the language model now (e.g. at start-up) instead of on the first checked reply."""
    from handoffmon.checkers.langid_model import full_identifier

    full_identifier()


def known_languages() -> tuple[str, ...]:
    """ISO 639-1 codes the model can answer."""
    from handoffmon.checkers.langid_model import full_identifier

    return full_identifier().labels


def detect(text: str, candidates: tuple[str, ...] = ()) -> tuple[str, float]:
    """(language code, probability) of ``text``, choosing among ``candidates`` (``()`` = all)."""
    from handoffmon.checkers.langid_model import identifier

    return identifier(candidates).classify(text)


def language(p: Params) -> CheckFn:
    """The reply is in one of ``languages``.

    Params:
        languages: allowed ISO 639-1 codes (e.g. ``[en]``).
        candidates: optional codes the detector chooses among (default: all 97).
        min_confidence: below this probability → not_applicable (default 0.5).
        min_chars: shorter replies (stripped) → not_applicable (default 20).
        max_chars: only the first max_chars characters are examined (default 2000).

    Invisible format characters (zero-width, bidi controls, BOM) are removed before anything
    is counted or read; text with no linguistic content (emoji, symbols: the model's ``zxx``)
    is ``not_applicable`` / ``no_language`` unless ``zxx`` is allowed.
    """
    from handoffmon.checkers.langid_model import identifier

    allowed = frozenset(p.str_list("languages"))
    candidates = tuple(sorted(p.str_list("candidates", ())))
    min_conf = p.float("min_confidence", 0.5, lo=0.0, hi=1.0)
    min_chars = p.int("min_chars", 20, min_value=0)
    max_chars = p.int("max_chars", 2000, min_value=1)
    known = set(known_languages())
    for key, codes in (("languages", allowed), ("candidates", candidates)):
        unknown = sorted(set(codes) - known)
        if unknown:
            raise ParamError(key, f"unknown language code(s) {unknown}; known: {', '.join(sorted(known))}")
    if candidates and not allowed & set(candidates):
        raise ParamError("candidates", "no allowed language is among the candidates")
    classify = identifier(candidates).classify
    strip_invisible = invisible().sub

    def check(reply: str, ctx: CheckContext) -> CheckOutcome:
        text = strip_invisible("", reply.strip()[: 2 * max_chars]).strip()[:max_chars]
        if len(text) < min_chars:
            return CheckOutcome("not_applicable", "too_short")
        lang, prob = classify(text)
        if prob < min_conf:
            return CheckOutcome("not_applicable", "low_confidence")
        if lang == NO_LANGUAGE and lang not in allowed:
            return CheckOutcome("not_applicable", "no_language")
        return PASS if lang in allowed else CheckOutcome("fail", f"language:{lang}")

    return check
