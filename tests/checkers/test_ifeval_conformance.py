"""Conformance: our IFEval verdicts against the reference verifier's on Llama-3.1-8B responses."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from handoffmon.checkers import CheckContext, RuleSet
from handoffmon.checkers.ifeval.adapter import ifeval_rules
from handoffmon.checkers.ifeval.evaluate import Mode, PromptInput, read_inputs, read_responses, run
from handoffmon.checkers.ifeval.instructions import INSTRUCTIONS, LANGDETECT_IDS

DATA = Path(__file__).parent.parent / "data" / "ifeval"
RANDOM_KEYS = {1122, 1129}  # keywords:letter_frequency with a non-letter: the reference draws at random
REQUIRED = 0.99
LANGDETECT_AGREEING = {"strict": 93, "loose": 93}
"""Of the 95 langdetect-based verdicts, how many agreed with the reference when langdetect
alone decided (seeded); py3langid deciding when it is ≥ 99% sure must not lower it."""


def _reference(mode: Mode) -> dict[str, dict[str, Any]]:
    reference = {}
    for line in (DATA / f"verdicts_llama31_8b_{mode}.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        reference[row["prompt"]] = row
    return reference


def _via_rules(inp: PromptInput, response: str, mode: Mode) -> list[bool]:
    """Verdicts the way the pipeline reaches them: ``ifeval_rules`` → ``RuleSet`` → ``evaluate``
    (params through ``Params``, text through ``clean_text``, every rule's name unique)."""
    rules = RuleSet.from_config(
        ifeval_rules(inp.instruction_id_list, inp.kwargs, loose=mode == "loose"), budget_s=30.0
    )
    results = rules.evaluate(response, CheckContext())
    assert [r.verdict for r in results if r.verdict not in ("pass", "fail")] == [], inp.key
    return [r.verdict == "pass" for r in results]


def _agreement(mode: Mode, *, path: str = "run") -> tuple[Counter[str], Counter[str]]:
    inputs = read_inputs(DATA / "input_data.jsonl")
    responses = read_responses(DATA / "responses_llama31_8b.jsonl")
    reference = _reference(mode)
    agree: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for inp, ours in zip(inputs, run(inputs, responses, mode), strict=True):
        ref = reference[inp.prompt]
        assert list(ours.instruction_id_list) == ref["instruction_id_list"]
        mine_all = ours.follow_instruction_list
        if path == "rules":
            mine_all = _via_rules(inp, responses[inp.prompt], mode)
        pairs = zip(
            ours.instruction_id_list,
            mine_all,
            ref["follow_instruction_list"],
            strict=True,
        )
        for iid, mine, theirs in pairs:
            if inp.key in RANDOM_KEYS and iid == "keywords:letter_frequency":
                continue
            total[iid] += 1
            agree[iid] += mine == theirs
    return agree, total


def _table(mode: str, agree: Counter[str], total: Counter[str]) -> str:
    lines = [
        f"\nIFEval {mode}: agreement with the reference verifier per instruction id",
        f"{'instruction id':48} {'agree':>5} / {'n':>3}   rate",
    ]
    for iid in sorted(total):
        flag = "  (langdetect)" if iid in LANGDETECT_IDS else ""
        lines.append(f"{iid:48} {agree[iid]:>5} / {total[iid]:>3}  {agree[iid] / total[iid]:6.1%}{flag}")
    return "\n".join(lines)


@pytest.mark.parametrize("mode", ["strict", "loose"])
def test_instruction_level_agreement_with_reference(mode: Mode) -> None:
    """≥ 99% instruction-level agreement excluding the two random verdicts; langdetect ids separately."""
    agree, total = _agreement(mode)
    print(_table(mode, agree, total))
    assert set(total) == set(INSTRUCTIONS), "every one of the 25 instruction ids is exercised"
    core = [i for i in total if i not in LANGDETECT_IDS]
    core_rate = sum(agree[i] for i in core) / sum(total[i] for i in core)
    lang_rate = sum(agree[i] for i in LANGDETECT_IDS) / sum(total[i] for i in LANGDETECT_IDS)
    all_rate = sum(agree.values()) / sum(total.values())
    print(
        f"{mode}: non-langdetect {core_rate:.2%} (n={sum(total[i] for i in core)}), "
        f"langdetect {lang_rate:.2%} (n={sum(total[i] for i in LANGDETECT_IDS)}), all {all_rate:.2%}"
    )
    # the docs claim every verdict of the 22 ids without langdetect: hold each id to it
    assert {i: (agree[i], total[i]) for i in core if agree[i] != total[i]} == {}
    assert core_rate == 1.0 and all_rate >= REQUIRED
    # the reference's langdetect is unseeded: a few ambiguous texts may go either way
    assert lang_rate >= 0.95
    assert sum(agree[i] for i in LANGDETECT_IDS) >= LANGDETECT_AGREEING[mode]


@pytest.mark.parametrize("mode", ["strict", "loose"])
def test_rules_built_from_instruction_lists_agree_like_the_verifier(mode: Mode) -> None:
    """The same agreement through the rule path a request's declaration takes. IFEval lists an
    id twice for a range (key 19: ``number_words`` at least 600 and less than 701); rules
    named by id alone collided, and the one kept misjudged 9 of the 737 verdicts."""
    agree, total = _agreement(mode, path="rules")
    assert set(total) == set(INSTRUCTIONS)
    core = [i for i in total if i not in LANGDETECT_IDS]
    assert {i: (agree[i], total[i]) for i in core if agree[i] != total[i]} == {}
    assert sum(agree[i] for i in LANGDETECT_IDS) >= LANGDETECT_AGREEING[mode]
