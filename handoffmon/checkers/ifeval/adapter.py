"""IFEval instructions as registry checkers: ``ifeval:<id>`` (strict) and ``ifeval_loose:<id>`` (loose).

Params are the instruction's IFEval kwargs, with the same names, e.g.
``{check: "ifeval:length_constraints:number_words", params: {relation: "at least", num_words: 300}}``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from handoffmon.checkers.base import PASS, CheckContext, CheckerSpec, CheckFn, CheckOutcome, Params
from handoffmon.checkers.ifeval.evaluate import Mode, follows
from handoffmon.checkers.ifeval.instructions import INSTRUCTIONS, Builder
from handoffmon.config import RuleConfig

STRICT_PREFIX = "ifeval:"
LOOSE_PREFIX = "ifeval_loose:"
_NOT_FOLLOWED = CheckOutcome("fail", "not_followed")


COSTS: dict[str, tuple[float, float]] = {
    "change_case:capital_word_frequency": (5100, 9600),
    "change_case:english_capital": (100, 100),
    "change_case:english_lowercase": (200, 1100),
    "combination:repeat_prompt": (10, 40),
    "combination:two_responses": (5, 40),
    "detectable_content:number_placeholders": (340, 400),
    "detectable_content:postscript": (10, 50),
    "detectable_format:constrained_response": (5, 35),
    "detectable_format:json_format": (75, 300),
    "detectable_format:multiple_sections": (35, 225),
    "detectable_format:number_bullet_lists": (450, 3400),
    "detectable_format:number_highlighted_sections": (30, 40),
    "detectable_format:title": (85, 500),
    "keywords:existence": (15, 180),
    "keywords:forbidden_words": (65, 95),
    "keywords:frequency": (45, 145),
    "keywords:letter_frequency": (100, 630),
    "language:response_language": (260, 700),
    "length_constraints:nth_paragraph_first_word": (45, 85),
    "length_constraints:number_paragraphs": (35, 150),
    "length_constraints:number_sentences": (5400, 5400),
    "length_constraints:number_words": (220, 220),
    "punctuation:no_comma": (5, 25),
    "startend:end_checker": (10, 30),
    "startend:quotation": (5, 25),
}
"""Instruction id → worst CPU nanoseconds per reply character (strict, loose), measured on
1 MB hostile shapes and rounded up by half (``CheckerSpec.cost``); the keyword-list
instructions cost this much per keyword."""

LOOSE_FLOOR = 150.0
"""Least cost of a loose check: building the eight variants copies the reply eight times,
and a 10 MB reply of short non-ASCII lines took 104 ns per character for that alone."""

_PER_KEYWORD = {"keywords:existence": "keywords", "keywords:forbidden_words": "forbidden_words"}


def _factory(iid: str, builder: Builder, mode: Mode) -> object:
    strict, loose = COSTS[iid]
    cost = strict if mode == "strict" else max(loose, LOOSE_FLOOR)

    def factory(p: Params) -> CheckFn:
        instruction = builder(p)
        listed = p.raw(_PER_KEYWORD[iid], ()) if iid in _PER_KEYWORD else ()
        p.set_cost(cost * max(1, len(listed) if isinstance(listed, (list, tuple)) else 1))

        def check(reply: str, ctx: CheckContext) -> CheckOutcome:
            return PASS if follows(instruction, reply, mode) else _NOT_FOLLOWED

        return check

    return factory


def ifeval_specs() -> list[CheckerSpec]:
    """One strict and one loose spec per instruction id."""
    specs = []
    for iid, builder in INSTRUCTIONS.items():
        specs.append(
            CheckerSpec(
                STRICT_PREFIX + iid,
                _factory(iid, builder, "strict"),  # type: ignore[arg-type]
                summary=f"IFEval {iid} (strict)",
            )
        )
        specs.append(
            CheckerSpec(
                LOOSE_PREFIX + iid,
                _factory(iid, builder, "loose"),  # type: ignore[arg-type]
                summary=f"IFEval {iid} (loose)",
            )
        )
    return specs


def ifeval_rules(
    instruction_ids: Sequence[str], kwargs: Sequence[Mapping[str, Any] | None], *, loose: bool = False
) -> tuple[RuleConfig, ...]:
    """Rules for an IFEval / Multi-IF instruction list: one rule per instruction, named by its id.

    Naming rules by instruction id makes Multi-IF's accumulation natural: a later turn that
    redeclares an id (possibly with new kwargs) replaces it (``RuleSet.accumulate``). An id
    listed again in the same list is a second constraint, not a replacement (IFEval writes
    ranges so: ``number_words`` at least 600, then less than 701), so its k-th occurrence is
    named ``<id>#k``, as the Multi-IF scripts name it. ``None`` kwargs values are dropped
    (Multi-IF files carry them). Raises ``ValueError`` when the two lists differ in length.
    """
    if len(instruction_ids) != len(kwargs):
        raise ValueError("instruction_ids and kwargs must have the same length")
    prefix = LOOSE_PREFIX if loose else STRICT_PREFIX
    seen: Counter[str] = Counter()
    rules = []
    for iid, kw in zip(instruction_ids, kwargs, strict=True):
        seen[iid] += 1
        rules.append(
            RuleConfig(
                name=iid if seen[iid] == 1 else f"{iid}#{seen[iid]}",
                check=prefix + iid,
                params={k: v for k, v in (kw or {}).items() if v is not None},
            )
        )
    return tuple(rules)
