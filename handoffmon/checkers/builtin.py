"""The built-in checker kinds, as registry specs, and ``default_registry()`` holding them."""

from __future__ import annotations

from handoffmon.checkers import answer, json_checks, language, length, text
from handoffmon.checkers.base import CheckerRegistry, CheckerSpec


def general_specs() -> list[CheckerSpec]:
    """The general (non-IFEval) checkers.

    ``cost``: worst CPU nanoseconds per reply character measured on 1 MB hostile shapes
    (prose, all caps, markdown, NUL/bidi/zero-width, CJK, one-character lines, ``a. a.``,
    punctuation runs, JSON documents), rounded up by half; ``length`` and ``keywords_present``
    set theirs from their params.
    """
    return [
        CheckerSpec("regex_must_match", text.regex_must_match, summary="RE2 pattern must occur", cost=300),
        CheckerSpec(
            "regex_must_not_match", text.regex_must_not_match, summary="RE2 pattern must not occur", cost=300
        ),
        CheckerSpec("keywords_present", text.keywords_present, summary="keywords must appear", cost=30),
        CheckerSpec("keywords_absent", text.keywords_absent, summary="keywords must not appear", cost=30),
        CheckerSpec("starts_with", text.starts_with, summary="reply starts with a phrase", cost=5),
        CheckerSpec("ends_with", text.ends_with, summary="reply ends with a phrase", cost=5),
        CheckerSpec("letter_case", text.letter_case, summary="all lower / upper case", cost=30),
        CheckerSpec("no_commas", text.no_commas, summary="no comma", cost=5),
        CheckerSpec("length", length.length, summary="chars/words/sentences/paragraphs/bullets bounds"),
        CheckerSpec("language", language.language, summary="reply language (py3langid)", cost=5),
        CheckerSpec("valid_json", json_checks.valid_json, summary="reply parses as JSON", cost=75),
        CheckerSpec(
            "json_schema", json_checks.json_schema, summary="JSON valid against a JSON Schema", cost=1500
        ),
        CheckerSpec(
            "pydantic_model", json_checks.pydantic_model, summary="JSON valid as a pydantic model", cost=150
        ),
        CheckerSpec("answer_tag", answer.answer_tag, summary="exactly one <answer>…</answer>", cost=10),
        CheckerSpec(
            "answer_flip",
            answer.answer_flip,
            stateful=True,
            summary="answer changed after a user challenge",
            cost=10,
        ),
    ]


def builtin_specs() -> list[CheckerSpec]:
    """Every built-in checker: general ones plus ``ifeval:<id>`` and ``ifeval_loose:<id>``."""
    from handoffmon.checkers.ifeval.adapter import ifeval_specs

    return [*general_specs(), *ifeval_specs()]


def default_registry() -> CheckerRegistry:
    """A fresh registry holding every built-in checker (general, stateful and IFEval).

    Lives here, not in ``base``: the built-ins import ``base``, so ``base`` importing them
    back made the checkers one import cycle.
    """
    return CheckerRegistry(builtin_specs())
