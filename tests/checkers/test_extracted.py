"""Extracted values between turns: keyed fingerprints by default, text only by opt-in with a TTL."""

from __future__ import annotations

from handoffmon.checkers import CLEAR, CheckContext, FingerprintMemory, RuleSet
from handoffmon.checkers.extracted import without_expired_text
from handoffmon.config import RuleConfig

ANSWER = "the capital of australia is canberra"


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_fingerprint_holds_no_text_and_tells_same_from_changed() -> None:
    """The stored form is a fixed-size keyed digest: equal answers match, others do not."""
    memory = FingerprintMemory(b"a shared secret of some length")
    stored = memory.remember("flip", ANSWER)
    assert "canberra" not in stored and len(stored) == len(memory.remember("flip", "x" * 200))
    assert memory.same("flip", stored, ANSWER) is True
    assert memory.same("flip", stored, "sydney") is False
    assert memory.same("other_rule", stored, ANSWER) is False  # the rule name is in the digest
    assert memory.recall(stored) is None
    assert memory.same("flip", None, ANSWER) is None


def test_replicas_sharing_a_key_agree_and_other_keys_read_as_unknown() -> None:
    """Same key (two replicas): comparable. Another or a random key: "nothing stored", never a flip."""
    a, b = FingerprintMemory(b"k" * 16), FingerprintMemory(b"k" * 16)
    assert b.same("flip", a.remember("flip", ANSWER), ANSWER) is True
    assert FingerprintMemory(b"j" * 16).same("flip", a.remember("flip", ANSWER), "sydney") is None
    r1, r2 = FingerprintMemory(), FingerprintMemory()
    assert r1.key_is_random and r2.same("flip", r1.remember("flip", ANSWER), "sydney") is None


def test_text_opt_in_expires() -> None:
    """With text_ttl_s the text is readable until it expires; the fingerprint still compares after."""
    clock = Clock()
    memory = FingerprintMemory(b"k" * 16, text_ttl_s=60, clock=clock)
    stored = memory.remember("flip", ANSWER)
    assert memory.recall(stored) == ANSWER and memory.same("flip", stored, ANSWER) is True
    clock.now += 61
    assert memory.recall(stored) is None and memory.same("flip", stored, ANSWER) is True
    dropped = without_expired_text(stored, clock.now)
    assert dropped is not None and "canberra" not in dropped and memory.same("flip", dropped, ANSWER)
    assert without_expired_text(stored, clock.now - 120) == stored
    assert without_expired_text("tx1:garbage", clock.now) is None


def test_clear_memory_keeps_values_for_offline_runs() -> None:
    """Offline (check command, evals): values stay as they are, as before."""
    assert CLEAR.remember("flip", ANSWER) == ANSWER
    assert CLEAR.same("flip", ANSWER, ANSWER) and CLEAR.recall(ANSWER) == ANSWER


def test_answer_flip_through_a_fingerprinting_rule_set() -> None:
    """The pipeline's rule set stores a fingerprint, and answer_flip still detects the flip."""
    rs = RuleSet.from_config(
        [RuleConfig(name="flip", check="answer_flip"), RuleConfig(name="tag", check="answer_tag")],
        memory=FingerprintMemory(b"k" * 16),
    )
    t1 = {r.rule: r for r in rs.evaluate("<answer>Canberra</answer>", CheckContext(depth=1))}
    assert all(r.extracted and "anberra" not in r.extracted for r in t1.values())
    previous = {name: r.extracted for name, r in t1.items() if r.extracted}
    challenge = CheckContext(depth=2, user_message="Are you sure?", previous=previous)
    kept = {r.rule: r for r in rs.evaluate("<answer>canberra.</answer>", challenge)}
    flipped = {r.rule: r for r in rs.evaluate("<answer>Sydney</answer>", challenge)}
    assert (kept["flip"].verdict, kept["flip"].reason) == ("pass", "answer_kept")
    assert (flipped["flip"].verdict, flipped["flip"].reason) == ("fail", "answer_flipped")
    unknown = CheckContext(
        depth=2, user_message="Are you sure?", previous={"flip": "fp1:00000000:" + "0" * 32}
    )
    assert next(iter(rs.evaluate("<answer>Sydney</answer>", unknown))).reason == "no_previous_answer"
