"""The writer's replies get exactly the intended verdict from handoffmon's real checkers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from handoffmon.checkers import CheckContext, RuleSet
from handoffmon.sim.fleet import DEFAULT_RULES, SimRule, default_fleet
from handoffmon.sim.rules import rule_configs
from handoffmon.sim.writer import ReplyWriter, word_bounds


@pytest.fixture(scope="module")
def five_rules() -> tuple[tuple[SimRule, ...], RuleSet]:
    fleet = default_fleet(n_rules=6)  # every stateless rule; answer stability has its own test
    return fleet.rules, RuleSet.from_config(rule_configs(fleet), budget_s=5.0)


def test_every_intent_combination_gets_the_intended_verdict_from_real_checkers(five_rules) -> None:
    """All 64 pass/fail combinations of the six demo rules, 10 replies each: checkers agree 100%."""
    rules, ruleset = five_rules
    writer = ReplyWriter(rules)
    rng = np.random.default_rng(3)
    names = [r.name for r in rules]
    mismatches = []
    for combo in itertools.product([True, False], repeat=len(names)):
        intent = dict(zip(names, combo, strict=True))
        for _ in range(10):
            text = writer.write(intent, rng)
            verdicts = {c.rule: c.verdict for c in ruleset.evaluate(text, CheckContext())}
            wanted = {n: "pass" if ok else "fail" for n, ok in intent.items()}
            if verdicts != wanted:
                mismatches.append((wanted, verdicts, text))
    assert not mismatches, mismatches[:3]


def test_language_of_replies_is_classified_confidently_by_py3langid() -> None:
    """Spanish and English replies are long enough for a confident classification (no not_applicable)."""
    import py3langid

    writer = ReplyWriter(default_fleet().rules)
    rng = np.random.default_rng(5)
    for spanish in (True, False):
        for _ in range(50):
            intent = {"reply_in_spanish": spanish, "max_60_words": True}
            lang, _ = py3langid.classify(writer.write(intent, rng))
            assert lang == ("es" if spanish else "en")


def test_length_margins_hold_for_any_word_counter() -> None:
    """Compliant replies stay ≤ 0.8 × max words by whitespace and \\w+ counts; failing ones exceed 1.2 ×."""
    writer = ReplyWriter(default_fleet().rules)
    rng = np.random.default_rng(9)
    for _ in range(100):
        lo, hi = word_bounds(writer.write({"max_60_words": True}, rng))
        assert hi <= 48
        lo, hi = word_bounds(writer.write({"max_60_words": False}, rng))
        assert lo > 72


def test_same_seed_same_reply_and_different_seed_different_reply() -> None:
    """The writer is a pure function of (intent, rng state)."""
    writer = ReplyWriter(default_fleet().rules)
    intent = {"no_commas": False}
    a = writer.write(intent, np.random.default_rng(1))
    assert a == writer.write(intent, np.random.default_rng(1))
    assert a != writer.write(intent, np.random.default_rng(2))


def test_answer_is_kept_or_flipped_after_a_challenge_as_intended() -> None:
    """answer_flip passes when the writer keeps the previous answer, fails when it changes it."""
    fleet = default_fleet(n_rules=len(DEFAULT_RULES))
    ruleset = RuleSet.from_config(rule_configs(fleet), budget_s=5.0)
    writer = ReplyWriter(fleet.rules)
    rng = np.random.default_rng(8)
    first, answer = writer.compose({}, rng)
    assert answer is not None and f"<answer>{answer}</answer>" in first
    for keep in (True, False) * 20:
        text, new = writer.compose({"stable_answer": keep}, rng, previous_answer=answer)
        ctx = CheckContext(user_message="Are you sure?", previous={"stable_answer": answer})
        verdict = {c.rule: c.verdict for c in ruleset.evaluate(text, ctx)}["stable_answer"]
        assert verdict == ("pass" if keep else "fail")
        assert (new == answer) == keep
        unchallenged = {
            c.rule: c.verdict
            for c in ruleset.evaluate(
                text, CheckContext(user_message="Where is my order?", previous={"stable_answer": answer})
            )
        }
        assert unchallenged["stable_answer"] == "not_applicable"
        answer = new


def test_a_missing_tag_carries_the_previous_answer_forward() -> None:
    """No extractable answer → the latest answer stays the previous one (as the pipeline stores it)."""
    writer = ReplyWriter(default_fleet(n_rules=len(DEFAULT_RULES)).rules)
    rng = np.random.default_rng(2)
    seen = set()
    for _ in range(40):
        text, latest = writer.compose({"answer_tag": False}, rng, previous_answer="12345")
        seen.add("<answer>" in text)
        assert latest == "12345" or f"<answer>{latest}</answer> <answer>{latest}</answer>" in text
    assert seen == {True, False}  # both failure variants occurred
