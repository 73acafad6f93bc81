"""Per-conversation state: rule accumulation, transitions from last pass/fail verdicts, round trip."""

from __future__ import annotations

from handoffmon.pipeline.state import ConversationState
from handoffmon.types import CheckResult, Transition


def _check(rule: str, verdict: str, extracted: str | None = None) -> CheckResult:
    return CheckResult(rule, verdict, extracted=extracted)  # type: ignore[arg-type]


def test_transition_from_last_verdict_of_same_rule() -> None:
    """A pass at depth 1 then a fail at depth 2 is one pass→fail transition; depth 1 has none."""
    s, t1 = ConversationState().advance(1, (_check("r", "pass"),))
    s, t2 = s.advance(2, (_check("r", "fail"),))
    assert t1 == ()
    assert t2 == (Transition("r", "pass", "fail"),)


def test_not_applicable_and_error_are_skipped_not_breaks() -> None:
    """Turns where the rule was not applicable or errored emit nothing and keep the last verdict."""
    s, _ = ConversationState().advance(1, (_check("r", "fail"),))
    s, t2 = s.advance(2, (_check("r", "not_applicable"),))
    s, t3 = s.advance(3, (_check("r", "error"),))
    s, t4 = s.advance(4, (_check("r", "pass"),))
    assert (t2, t3) == ((), ())
    assert t4 == (Transition("r", "fail", "pass"),)


def test_regenerated_reply_at_same_depth_replaces_without_transition() -> None:
    """A retried turn (same depth) updates the last verdict but is not a transition."""
    s, _ = ConversationState().advance(3, (_check("r", "fail"),))
    s, t = s.advance(3, (_check("r", "pass"),))
    assert t == ()
    s, t = s.advance(4, (_check("r", "pass"),))
    assert t == (Transition("r", "pass", "pass"),)


def test_rules_are_independent() -> None:
    """Each rule transitions from its own last verdict."""
    s, _ = ConversationState().advance(1, (_check("a", "pass"), _check("b", "fail")))
    _, t = s.advance(2, (_check("a", "fail"), _check("b", "fail")))
    assert set(t) == {Transition("a", "pass", "fail"), Transition("b", "fail", "fail")}


def test_declared_rules_apply_from_their_depth_and_new_definition_wins() -> None:
    """A rule declared at turn k applies at turns ≥ k; redeclaring keeps k but takes new params."""
    s = ConversationState().declare(({"name": "x", "check": "length", "params": {"max": 3}},), 2)
    assert s.active_rules(1) == ()
    assert [r["name"] for r in s.active_rules(2)] == ["x"]
    s = s.declare(({"name": "x", "check": "length", "params": {"max": 9}},), 4)
    assert s.declared_rules[0][0] == 2
    assert s.active_rules(5)[0]["params"] == {"max": 9}


def test_extracted_values_and_round_trip() -> None:
    """Extracted values carry to the next turn and the state survives a JSON-shaped round trip."""
    s, _ = ConversationState().advance(1, (_check("ans", "pass", "42"),))
    s = s.declare(({"name": "y", "check": "length", "params": {}},), 1)
    back = ConversationState.from_mapping(s.to_mapping())
    assert back == s
    assert back.previous == {"ans": "42"}
    assert ConversationState.from_mapping({"v": 999}) == ConversationState()


def test_opted_in_answer_text_is_dropped_from_the_stored_state_once_expired() -> None:
    """rule_state.text_ttl_s: text past its expiry never reaches the store again; the
    fingerprint stays (a later turn still compares), and malformed entries are dropped."""
    from handoffmon.checkers import FingerprintMemory

    now = 1_000_000.0
    memory = FingerprintMemory(b"k" * 16, text_ttl_s=60, clock=lambda: now)
    stored = memory.remember("ans", "canberra")
    s, _ = ConversationState().advance(1, (_check("ans", "pass", stored), _check("bad", "pass", "tx1:junk")))
    fresh = s.to_mapping(now_s=now + 30)["previous"]
    assert fresh == {"ans": stored}  # type: ignore[comparison-overlap]
    expired = s.to_mapping(now_s=now + 61)["previous"]
    assert isinstance(expired, dict) and set(expired) == {"ans"} and "canberra" not in expired["ans"]
    assert memory.same("ans", expired["ans"], "canberra") is True
    assert (
        len(s.declared) == 0
        and s.declare(({"name": "y", "check": "no_commas"},), 2).declared[0]["name"] == "y"
    )


def _reference_tallied(
    state: ConversationState, author: str, prefix: str, clean: bool, checks: tuple[CheckResult, ...]
) -> tuple[dict[tuple[str, str, str], tuple[int, int]], tuple[object, ...]]:
    """``ConversationState._tallied`` as it was before its increments were inlined."""
    from handoffmon.counts import POOLED_RULE, cluster_increments, in_cell
    from handoffmon.pipeline.state import MARKOV_VERDICTS, MAX_CELLS
    from handoffmon.types import ClusterStep

    if not in_cell(author, prefix, clean):
        return dict(state.cells), ()
    verdicts = [(c.rule, c.verdict == "pass") for c in checks if c.verdict in MARKOV_VERDICTS]
    if not verdicts:
        return dict(state.cells), ()
    cells = dict(state.cells)
    steps: dict[str, list[int]] = {}
    verdicts.extend([(POOLED_RULE, p) for _, p in verdicts])
    for rule, passed in verdicts:
        cell = (rule, author, prefix)
        got = cells.get(cell)
        if got is not None:
            y, n = got
            cells[cell] = (y + passed, n + 1)
        else:
            y = n = 0
            if len(cells) < MAX_CELLS:
                cells[cell] = (int(passed), 1)
        g, y2, yn, n2 = cluster_increments(y, n, passed)
        acc = steps.get(rule)
        if acc is None:
            steps[rule] = [g, y2, yn, n2]
        else:
            acc[0] += g
            acc[1] += y2
            acc[2] += yn
            acc[3] += n2
    return cells, tuple(ClusterStep(r, *v) for r, v in steps.items())


def test_tally_matches_the_reference_increments() -> None:
    """Random conversations (a rule named ``all`` too, a full cell table): same cells, in the
    same order, and the same cluster steps, in the same order, as the reference."""
    import random

    from handoffmon.pipeline import state as state_mod

    rng = random.Random(3)
    rules, models = ("a", "b", "all", "c"), ("m1", "m2", "m3")
    verdicts = ("pass", "fail", "not_applicable", "error")
    nonempty = 0
    for cap in (state_mod.MAX_CELLS, 5):
        old_cap, state_mod.MAX_CELLS = state_mod.MAX_CELLS, cap
        try:
            for _ in range(40):
                s = ConversationState()
                for _ in range(12):
                    author, prefix = rng.choice(models), rng.choice(models)
                    clean = rng.random() < 0.5
                    picked = rng.sample(rules, rng.randrange(len(rules) + 1))
                    checks = tuple(_check(r, rng.choice(verdicts)) for r in picked)
                    want_cells, want_steps = _reference_tallied(s, author, prefix, clean, checks)
                    new, steps = s.tally(author, prefix, clean, checks)
                    assert list(new.cells.items()) == list(want_cells.items())
                    assert steps == want_steps
                    assert all(type(v) is int for st in steps for v in st[1:])
                    nonempty += bool(steps)
                    s = new
        finally:
            state_mod.MAX_CELLS = old_cap
    assert nonempty > 300


def test_fast_constructors_build_what_the_dataclasses_build() -> None:
    """The slot-setter constructors give equal, equally hashed, still frozen objects."""
    import dataclasses

    import pytest

    from handoffmon.pipeline.state import LastVerdict, _last_verdict, _transition

    lv, tr = _last_verdict("pass", 3), _transition("r", "pass", "fail")
    assert (
        type(lv) is LastVerdict and lv == LastVerdict("pass", 3) and hash(lv) == hash(LastVerdict("pass", 3))
    )
    assert (
        type(tr) is Transition
        and tr == Transition("r", "pass", "fail")
        and repr(tr) == repr(Transition("r", "pass", "fail"))
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        lv.depth = 4  # type: ignore[misc]
