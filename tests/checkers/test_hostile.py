"""Hostile input for every checker: empty, blank, 1 MB, lone surrogates, regex bombs, deep JSON."""

from __future__ import annotations

import time

import pytest

from handoffmon.checkers import CheckContext, Rule, default_registry
from handoffmon.checkers.ifeval.instructions import INSTRUCTIONS

REG = default_registry()
SCHEMA = {"type": "object", "properties": {"a": {"type": "array"}}}

GENERAL: list[tuple[str, dict[str, object]]] = [
    ("regex_must_match", {"pattern": r"(a+)+$"}),
    ("regex_must_match", {"pattern": r"(a|aa)*b", "min_count": 2}),
    ("regex_must_not_match", {"pattern": r"(x+x+)+y"}),
    ("keywords_present", {"keywords": ["alpha", "beta"]}),
    ("keywords_present", {"keywords": ["alpha", "beta"], "require": "any", "whole_word": False}),
    ("keywords_absent", {"keywords": ["sorry", "as an ai"]}),
    ("starts_with", {"prefix": "Dear", "case_sensitive": False}),
    ("ends_with", {"suffix": "Thanks."}),
    ("letter_case", {"case": "lower"}),
    ("no_commas", {}),
    ("length", {"unit": "chars", "max": 100}),
    ("length", {"unit": "words", "min": 1}),
    ("length", {"unit": "sentences", "max": 10}),
    ("length", {"unit": "paragraphs", "max": 3}),
    ("length", {"unit": "bullets", "min": 1}),
    ("language", {"languages": ["en"]}),
    ("valid_json", {}),
    ("json_schema", {"schema": SCHEMA}),
    ("pydantic_model", {"model": "handoffmon.config:ScopeConfig"}),
    ("answer_tag", {}),
    ("answer_flip", {}),
]

IFEVAL_KWARGS: dict[str, dict[str, object]] = {
    "keywords:existence": {"keywords": ["alpha"]},
    "keywords:frequency": {"keyword": "a", "frequency": 2, "relation": "at least"},
    "keywords:forbidden_words": {"forbidden_words": ["sorry"]},
    "keywords:letter_frequency": {"letter": "a", "let_frequency": 3, "let_relation": "less than"},
    "language:response_language": {"language": "en"},
    "length_constraints:number_sentences": {"num_sentences": 3, "relation": "less than"},
    "length_constraints:number_paragraphs": {"num_paragraphs": 2},
    "length_constraints:number_words": {"num_words": 10, "relation": "at least"},
    "length_constraints:nth_paragraph_first_word": {
        "num_paragraphs": 2,
        "nth_paragraph": 1,
        "first_word": "a",
    },
    "detectable_content:number_placeholders": {"num_placeholders": 1},
    "detectable_content:postscript": {"postscript_marker": "P.S."},
    "detectable_format:number_bullet_lists": {"num_bullets": 2},
    "detectable_format:number_highlighted_sections": {"num_highlights": 2},
    "detectable_format:multiple_sections": {"section_spliter": "Section", "num_sections": 2},
    "combination:repeat_prompt": {"prompt_to_repeat": "Say hi"},
    "startend:end_checker": {"end_phrase": "Bye."},
    "change_case:capital_word_frequency": {"capital_frequency": 2, "capital_relation": "at least"},
}

MB = 1_000_000
HOSTILE: dict[str, str] = {
    "empty": "",
    "blank": "  \n\t \r\n ",
    "one_mb_prose": ("The quick brown fox, e.g. Mr. Smith, jumps. Is it 3.5? Yes! " * (MB // 60 + 1))[:MB],
    "one_mb_no_spaces": "a" * MB,
    "lone_surrogates": "start \ud800 mid \udfff end. <answer>\ud83d</answer> ok",
    "regex_bomb": "a" * 50_000 + "!",
    "regex_bomb_x": "x" * 50_000,
    "json_nested_10k": "[" * 10_000 + "]" * 10_000,
    "json_nested_10k_objects": '{"a":' * 10_000 + "1" + "}" * 10_000,
    # shapes that make the reference IFEval regexes backtrack quadratically
    "brackets": "[" * 100_000,
    "newlines": "\n" * 100_000 + "x",
    "space_newlines": " \n" * 50_000,
    "angles": "<" * 100_000 + "x",
}

VALID = {"pass", "fail", "not_applicable"}


def _run(kind: str, params: dict[str, object], reply: str) -> tuple[str, str, float]:
    checker = REG.build(kind, params)
    rule = Rule("r", checker, budget_s=60.0)
    ctx = CheckContext(user_message="Are you sure?", previous={"r": "a"})
    start = time.process_time()
    res = rule.run(reply, ctx)
    return res.verdict, res.reason, time.process_time() - start


@pytest.mark.parametrize("name", list(HOSTILE))
@pytest.mark.parametrize(("kind", "params"), GENERAL, ids=[f"{k}-{i}" for i, (k, _) in enumerate(GENERAL)])
def test_general_checkers_survive_hostile_input(kind: str, params: dict[str, object], name: str) -> None:
    """A real verdict (never error/crash) within bounded CPU time, on every hostile input."""
    verdict, reason, elapsed = _run(kind, params, HOSTILE[name])
    assert verdict in VALID, f"{kind} on {name}: {verdict} {reason}"
    assert elapsed < 5.0, f"{kind} on {name} took {elapsed:.2f}s"


@pytest.mark.parametrize(
    "name",
    [
        "empty",
        "blank",
        "lone_surrogates",
        "json_nested_10k",
        "regex_bomb",
        "brackets",
        "newlines",
        "space_newlines",
        "angles",
    ],
)
@pytest.mark.parametrize("iid", sorted(INSTRUCTIONS))
def test_ifeval_checkers_survive_hostile_input(iid: str, name: str) -> None:
    """IFEval checks give a verdict on hostile input, in linear time; blank replies never follow."""
    verdict, reason, elapsed = _run("ifeval:" + iid, IFEVAL_KWARGS.get(iid, {}), HOSTILE[name])
    assert verdict in {"pass", "fail"}, reason
    assert elapsed < 3.0, f"{iid} on {name} took {elapsed:.2f}s"
    if name in ("empty", "blank"):
        assert verdict == "fail"


def test_specific_hostile_verdicts() -> None:
    """Deep JSON fails as too deep; regex bombs answer correctly; blank/empty are judged, not crashed."""
    assert _run("valid_json", {}, HOSTILE["json_nested_10k"])[:2] == ("fail", "json_too_deep")
    assert _run("json_schema", {"schema": SCHEMA}, HOSTILE["json_nested_10k_objects"])[:2] == (
        "fail",
        "json_too_deep",
    )
    model = {"model": "handoffmon.config:ScopeConfig"}
    assert _run("pydantic_model", model, HOSTILE["json_nested_10k"])[0] == "fail"
    assert _run("regex_must_match", {"pattern": r"(a+)+$"}, HOSTILE["regex_bomb"])[0] == "fail"
    assert _run("regex_must_match", {"pattern": r"(a+)+!$"}, HOSTILE["regex_bomb"])[0] == "pass"
    assert _run("valid_json", {}, "")[:2] == ("fail", "empty_json")
    assert _run("language", {"languages": ["en"]}, "   ")[:2] == ("not_applicable", "too_short")
    assert _run("letter_case", {"case": "lower"}, "")[0] == "not_applicable"
    assert _run("answer_tag", {}, "")[:2] == ("fail", "missing_tag")


def test_regex_bomb_is_linear_with_re2() -> None:
    """(a+)+$ against 1 MB of 'a' plus '!' — exponential for backtracking engines — is fast."""
    verdict, _, elapsed = _run("regex_must_match", {"pattern": r"(a+)+$"}, "a" * MB + "!")
    assert verdict == "fail"
    assert elapsed < 0.5


TEN_MB = 10 * MB
HUGE = (
    "The quick brown fox, e.g. Mr. SMITH, jumps. a. a. a.\n* item\n- x\n1. y\n\n"
    "abc\x00\u202edef\u200b\u200dghi \ud800 ע ت 你好，世界。{}[]<>\n"
)
HUGE = (HUGE * (TEN_MB // len(HUGE) + 1))[:TEN_MB]


@pytest.mark.parametrize(
    ("kind", "params"),
    GENERAL
    + [(f"ifeval:{i}", IFEVAL_KWARGS.get(i, {})) for i in sorted(INSTRUCTIONS)]
    + [(f"ifeval_loose:{i}", IFEVAL_KWARGS.get(i, {})) for i in sorted(INSTRUCTIONS)],
    ids=[f"{k}-{i}" for i, (k, _) in enumerate(GENERAL)]
    + sorted(INSTRUCTIONS)
    + [f"loose-{i}" for i in sorted(INSTRUCTIONS)],
)
def test_ten_mb_reply_costs_at_most_a_few_budgets(kind: str, params: dict[str, object]) -> None:
    """A 10 MB reply (prose, Punkt-hard ``a. a.``, markdown, NUL, bidi, zero-width, lone
    surrogates, CJK) under the default 50 ms budget: a verdict or ``error``, never more than a
    second of CPU (capital-word counting took 39 s before replies were sized against the
    checker's cost, Punkt sentences 11 s)."""
    rule = Rule("r", REG.build(kind, params), budget_s=0.05)
    ctx = CheckContext(user_message="Are you sure?", previous={"r": "a"})
    start = time.process_time()
    res = rule.run(HUGE, ctx)
    elapsed = time.process_time() - start
    assert res.verdict in VALID or res.reason in ("too_large", "over_budget"), (res.verdict, res.reason)
    assert elapsed < 1.0, f"{kind} on 10 MB took {elapsed:.2f}s ({res.verdict}/{res.reason})"
