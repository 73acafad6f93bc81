"""IFEval instructions as registry checkers: ``ifeval:<id>`` (strict) and ``ifeval_loose:<id>`` (loose).

Params are the instruction's IFEval kwargs, with the same names, e.g.
``{check: "ifeval:length_constraints:number_words", params: {relation: "at least", num_words: 300}}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from handoffmon.checkers.base import PASS, CheckContext, CheckerSpec, CheckFn, CheckOutcome, Params
from handoffmon.checkers.ifeval.evaluate import Mode, follows
from handoffmon.checkers.ifeval.instructions import INSTRUCTIONS, Builder
from handoffmon.config import RuleConfig

STRICT_PREFIX = "ifeval:"
LOOSE_PREFIX = "ifeval_loose:"
_NOT_FOLLOWED = CheckOutcome("fail", "not_followed")


def _factory(builder: Builder, mode: Mode) -> object:
    def factory(p: Params) -> CheckFn:
        instruction = builder(p)

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
                _factory(builder, "strict"),  # type: ignore[arg-type]
                summary=f"IFEval {iid} (strict)",
            )
        )
        specs.append(
            CheckerSpec(
                LOOSE_PREFIX + iid,
                _factory(builder, "loose"),  # type: ignore[arg-type]
                summary=f"IFEval {iid} (loose)",
            )
        )
    return specs


def ifeval_rules(
    instruction_ids: Sequence[str], kwargs: Sequence[Mapping[str, Any] | None], *, loose: bool = False
) -> tuple[RuleConfig, ...]:
    """Rules for an IFEval / Multi-IF instruction list: one rule per id, named by the id.

    Naming rules by instruction id makes Multi-IF's accumulation natural: a later turn that
    redeclares an id (possibly with new kwargs) replaces it (``RuleSet.accumulate``).
    ``None`` kwargs values are dropped (Multi-IF files carry them). Raises ``ValueError``
    when the two lists differ in length.
    """
    if len(instruction_ids) != len(kwargs):
        raise ValueError("instruction_ids and kwargs must have the same length")
    prefix = LOOSE_PREFIX if loose else STRICT_PREFIX
    return tuple(
        RuleConfig(
            name=iid, check=prefix + iid, params={k: v for k, v in (kw or {}).items() if v is not None}
        )
        for iid, kw in zip(instruction_ids, kwargs, strict=True)
    )
