"""Multi-IF English: all 909 conversations load as scripts and every instruction id/kwarg builds a checker."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from handoffmon.checkers.rules import RuleSet
from handoffmon.errors import InputError
from handoffmon.evals.multiif import checker_support, load_multiif, read_multiif, to_script
from handoffmon.evals.runner import evaluate_turn

CSV = Path(__file__).resolve().parents[1] / "data" / "multi-if" / "multiIF_20241018_english.csv"


def test_all_909_english_conversations_load_and_every_instruction_is_accepted() -> None:
    """909 conversations, 2714 turns; every (id, kwargs) use builds an ``ifeval:<id>`` checker."""
    convs = list(read_multiif(CSV))
    assert len(convs) == 909
    assert len({c.key for c in convs}) == 909
    assert sum(len(c.turns) for c in convs) == 2714  # 896 three-turn + 13 two-turn conversations
    support = checker_support(convs)
    print(f"\nMulti-IF English checker support: {support.summary()}")
    assert support.rejected == {}
    assert support.accepted == support.uses == 6821
    assert len(support.accepted_ids) == len(support.ids) == 24
    assert len(support.accepted_kwarg_names) == len(support.kwarg_names) == 27


def test_instructions_accumulate_turn_by_turn() -> None:
    """Each turn is a checkpoint asserting exactly that turn's cumulative instruction list."""
    conv = next(iter(read_multiif(CSV)))
    script = to_script(conv)
    assert script.id == "multi-if:1019:16:en" and script.checkpoints == (1, 2, 3)
    for depth, turn in enumerate(conv.turns, start=1):
        assert script.asserted_at(depth) == turn.instruction_ids
    rules = {r.name: r for r in script.rules_at(3)}
    assert rules["startend:end_checker"].params == {"end_phrase": "what are they doing?"}
    assert rules["length_constraints:number_words"].check == "ifeval:length_constraints:number_words"


def test_multiif_rules_judge_replies_like_ifeval() -> None:
    """The accumulated rules run through the RuleSet: a lowercase reply ending in the phrase passes both."""
    script = to_script(next(iter(read_multiif(CSV))))
    previous: dict[str, str] = {}
    reply = "what is the boy holding? what are they doing?"
    results = {r.rule: r.verdict for r in evaluate_turn(RuleSet(budget_s=5.0), script, 2, reply, previous)}
    assert results == {"change_case:english_lowercase": "pass", "startend:end_checker": "pass"}
    results = {r.rule: r.verdict for r in evaluate_turn(RuleSet(budget_s=5.0), script, 3, reply, previous)}
    assert results["length_constraints:number_words"] == "fail"  # needs at least 801 words


def test_limit_and_bad_file_errors(tmp_path: Path) -> None:
    """--limit keeps the first N; a malformed cell names the file and line."""
    assert [s.id for s in load_multiif(CSV, limit=2)] == [
        "multi-if:1019:16:en",
        load_multiif(CSV, limit=2)[1].id,
    ]
    bad = tmp_path / "bad.csv"
    bad.write_text('key,turn_1_prompt,turn_1_instruction_id_list,turn_1_kwargs\nk1,"{not json",[],[]\n')
    with pytest.raises(InputError, match=r"bad\.csv:2 turn_1_prompt: not JSON"):
        list(read_multiif(bad))


@pytest.mark.parametrize(
    ("ids", "kwargs", "says"),
    [
        (["nope:nope"], [{}], "turn_1: unknown instruction id 'nope:nope'"),
        (["change_case:english_lowercase"], [{"bogus": 1}], "turn_1: change_case:english_lowercase: kwargs"),
    ],
)
def test_an_unknown_instruction_or_kwarg_is_refused_at_load(
    tmp_path: Path, ids: list[str], kwargs: list[dict[str, int]], says: str
) -> None:
    """An instruction id no checker has (a typo, a newer Multi-IF) used to load and run, every verdict
    'error', so the rule dropped out of n with exit 0; now the file and line are named, as by
    ``handoffmon ifeval``."""
    bad = tmp_path / "bad.csv"
    with bad.open("w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["key", "turn_1_prompt", "turn_1_instruction_id_list", "turn_1_kwargs"])
        w.writerow(["k1", json.dumps({"role": "user", "content": "Hi"}), json.dumps(ids), json.dumps(kwargs)])
    with pytest.raises(InputError, match=rf"bad\.csv:2 {re.escape(says)}"):
        load_multiif(bad)
