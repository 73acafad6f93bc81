"""IFEval instruction semantics (reference behaviour), loose variants, and their use as rules."""

from __future__ import annotations

import pytest

from handoffmon.checkers import CheckContext, ParamError, default_registry
from handoffmon.checkers.ifeval.evaluate import follows, loose_variants
from handoffmon.checkers.ifeval.instructions import INSTRUCTIONS, build_instruction


def ok(iid: str, response: str, **kwargs: object) -> bool:
    return follows(build_instruction(iid, kwargs), response, "strict")


def test_the_25_active_ids() -> None:
    """Exactly the reference's 25 active instruction ids."""
    assert len(INSTRUCTIONS) == 25
    assert {i.split(":")[0] for i in INSTRUCTIONS} == {
        "keywords",
        "language",
        "length_constraints",
        "detectable_content",
        "detectable_format",
        "combination",
        "startend",
        "change_case",
        "punctuation",
    }


def test_loose_variants_are_the_reference_eight() -> None:
    """raw, * removed, first/last/both lines dropped, and those with * removed — in that order."""
    v = loose_variants("Sure!\n*body*\nBye")
    assert v == (
        "Sure!\n*body*\nBye",
        "Sure!\nbody\nBye",
        "*body*\nBye",
        "Sure!\n*body*",
        "*body*",
        "body\nBye",
        "Sure!\nbody",
        "body",
    )


def test_loose_passes_when_a_variant_passes() -> None:
    """A preamble line fails strict quotation but passes loose (first line dropped)."""
    check = build_instruction("startend:quotation", {})
    text = 'Here you go:\n"quoted answer"'
    assert not follows(check, text, "strict")
    assert follows(check, text, "loose")


@pytest.mark.parametrize(
    ("iid", "kwargs", "good", "bad"),
    [
        ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hi.\nP.S. bye", "Hi. PS bye"),
        ("detectable_content:postscript", {"postscript_marker": "P.P.S"}, "x\np. p. s. more", "x\nP.S. y"),
        ("combination:two_responses", {}, "one\n******\ntwo", "same\n******\nsame"),
        (
            "length_constraints:nth_paragraph_first_word",
            {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
            'A\n\n"Then, b',
            "A\n\nNow b",
        ),
        (
            "detectable_format:number_highlighted_sections",
            {"num_highlights": 2},
            "*a* and **b**",
            "*a* and **",
        ),
        ("detectable_format:json_format", {}, '```JSON\n{"a": 1}\n```', "{'a': 1}"),
        ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* a\n- b", "* a\n** b"),
        (
            "detectable_format:multiple_sections",
            {"section_spliter": "Section", "num_sections": 2},
            "Section 1\nx\nSection 2\ny",
            "Section one",
        ),
        ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "a\n***\nb", "a\n***\n***\nb"),
        ("keywords:forbidden_words", {"forbidden_words": ["cat"]}, "concatenate", "A Cat."),
        ("keywords:frequency", {"keyword": "ab", "frequency": 2, "relation": "at least"}, "ab AB", "ab"),
        (
            "startend:end_checker",
            {"end_phrase": "Any questions?"},
            'ok. any questions?"  ',
            "any questions? no",
        ),
        ("detectable_format:title", {}, "<<Poem of Joy>>\ntext", "<< >> text"),
        ("detectable_format:constrained_response", {}, "  My answer is maybe.", "My answer is perhaps."),
        ("punctuation:no_comma", {}, "no commas", "a, b"),
    ],
)
def test_reference_semantics(iid: str, kwargs: dict[str, object], good: str, bad: str) -> None:
    """Each instruction follows the reference verifier's check_following on a pass/fail pair."""
    assert ok(iid, good, **kwargs)
    assert not ok(iid, bad, **kwargs)


def test_keywords_are_literal_not_regex() -> None:
    """Deliberate deviation: 'C++' is a literal keyword (the reference would raise re.error)."""
    assert ok("keywords:existence", "I write C++ daily", keywords=["C++"])
    assert not ok("keywords:existence", "I write CCC daily", keywords=["C++"])


@pytest.mark.parametrize(
    ("iid", "kwargs", "key"),
    [
        ("length_constraints:number_words", {"num_words": 5, "relation": "at most"}, "relation"),
        ("length_constraints:number_words", {"relation": "at least"}, "num_words"),
        (
            "keywords:letter_frequency",
            {"letter": "ab", "let_frequency": 1, "let_relation": "at least"},
            "letter",
        ),
        ("language:response_language", {"language": "klingon"}, "language"),
        ("punctuation:no_comma", {"extra": 1}, "extra"),
    ],
)
def test_bad_kwargs_name_the_key(iid: str, kwargs: dict[str, object], key: str) -> None:
    """Wrong, missing or unknown kwargs raise ParamError naming the kwarg."""
    with pytest.raises(ParamError) as e:
        build_instruction(iid, kwargs)
    assert e.value.key == key


def test_ifeval_as_rules_strict_and_loose() -> None:
    """ifeval:<id> (strict) and ifeval_loose:<id> (loose) take the IFEval kwargs as params."""
    reg = default_registry()
    strict = reg.build("ifeval:startend:quotation", {})
    loose = reg.build("ifeval_loose:startend:quotation", {})
    text = 'Here you go:\n"quoted answer"'
    assert strict(text, CheckContext()).verdict == "fail"
    assert loose(text, CheckContext()).verdict == "pass"
    words = reg.build("ifeval:length_constraints:number_words", {"relation": "less than", "num_words": 3})
    assert words("one two", CheckContext()).verdict == "pass"


def test_language_checks_are_deterministic() -> None:
    """Seeded langdetect: the same ambiguous text gets the same verdict every time."""
    text = "REFLECT ON YOUR EXPERIENCES: FOCUS ON SPECIFIC MOMENTS AND GROWTH."
    check = build_instruction("change_case:english_capital", {})
    assert len({check(text) for _ in range(5)}) == 1


def test_multi_if_turns_accumulate_by_instruction_id() -> None:
    """Multi-IF style: rules named by id; a later turn's kwargs replace the earlier ones."""
    from handoffmon.checkers import RuleSet
    from handoffmon.checkers.ifeval.adapter import ifeval_rules

    turn1 = ifeval_rules(["change_case:english_lowercase"], [{}])
    turn2 = ifeval_rules(
        ["change_case:english_lowercase", "startend:end_checker"],
        [{}, {"end_phrase": "what are they doing?", "unused": None}],
    )
    acc = RuleSet.accumulate(turn1, turn2)
    assert [r.name for r in acc] == ["change_case:english_lowercase", "startend:end_checker"]
    assert acc[1].params == {"end_phrase": "what are they doing?"}
    rs = RuleSet()
    results = rs.evaluate("the boys are playing. what are they doing?", CheckContext(), acc)
    assert [r.verdict for r in results] == ["pass", "pass"]
    (loose,) = ifeval_rules(["startend:quotation"], [{}], loose=True)
    assert loose.check == "ifeval_loose:startend:quotation"
