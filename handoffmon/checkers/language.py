"""Reply language: py3langid's model (shipped in its wheel), loaded once and lazily, scored vectorized."""

from __future__ import annotations

from handoffmon.checkers.base import PASS, CheckContext, CheckFn, CheckOutcome, ParamError, Params


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

    def check(reply: str, ctx: CheckContext) -> CheckOutcome:
        text = reply.strip()[:max_chars]
        if len(text) < min_chars:
            return CheckOutcome("not_applicable", "too_short")
        lang, prob = classify(text)
        if prob < min_conf:
            return CheckOutcome("not_applicable", "low_confidence")
        return PASS if lang in allowed else CheckOutcome("fail", f"language:{lang}")

    return check
