"""The checker contract: typed params, the registry, the context."""

from __future__ import annotations

import pytest

from handoffmon.checkers import (
    CheckContext,
    CheckerRegistry,
    CheckOutcome,
    ParamError,
    Params,
    default_registry,
)
from handoffmon.types import TurnContext


def _turn(depth: int) -> TurnContext:
    return TurnContext("c", "caller", depth, 0, 0, "none", 1.0, 0, (), 0)


def test_context_depth_follows_turn() -> None:
    """CheckContext.depth is the turn's depth when a turn is given, else the explicit value."""
    assert CheckContext(turn=_turn(7)).depth == 7
    assert CheckContext(turn=_turn(7), depth=2).depth == 7
    assert CheckContext(depth=3).depth == 3
    assert CheckContext().previous == {}


def test_context_user_message_defaults_to_turn() -> None:
    """The last user message comes from the turn unless given explicitly."""
    turn = TurnContext("c", "caller", 2, 0, 0, "m", 1.0, 1, (), 0, user_message="Are you sure?")
    assert CheckContext(turn=turn).user_message == "Are you sure?"
    assert CheckContext(turn=turn, user_message="other").user_message == "other"


def test_previous_value_is_looked_up_by_rule_name() -> None:
    """A stateful checker sees only its own rule's stored value."""
    ctx = CheckContext(previous={"flip": "42", "other": "x"}, rule="flip")
    assert ctx.previous_value == "42"
    assert CheckContext(previous={"other": "x"}, rule="flip").previous_value is None


def test_params_reject_wrong_types_and_unknown_keys() -> None:
    """Params name the offending key: wrong type, missing, out of range, unknown."""
    p = Params({"n": "3"})
    with pytest.raises(ParamError) as e:
        p.int("n")
    assert e.value.key == "n"
    with pytest.raises(ParamError) as e:
        Params({}).str("pattern")
    assert e.value.key == "pattern" and "required" in str(e.value)
    with pytest.raises(ParamError) as e:
        Params({"x": True}).int("x")
    assert e.value.key == "x"
    with pytest.raises(ParamError) as e:
        Params({"x": 0.5}).float("x", lo=1.0)
    assert e.value.key == "x"
    p = Params({"a": 1, "typo": 2})
    p.int("a")
    with pytest.raises(ParamError) as e:
        p.finish()
    assert e.value.key == "typo"


def test_registry_accepts_user_checkers_and_refuses_shadowing() -> None:
    """Users register their own kinds; an existing name is not silently replaced."""
    reg = default_registry()
    reg.register("shouty", lambda p: lambda reply, ctx: CheckOutcome("pass" if reply.isupper() else "fail"))
    checker = reg.build("shouty", {})
    assert checker("HI", CheckContext()).verdict == "pass"
    assert checker("hi", CheckContext()).verdict == "fail"
    with pytest.raises(ValueError):
        reg.register("shouty", lambda p: lambda r, c: CheckOutcome("pass"))
    assert "shouty" not in default_registry(), "registries are independent (no global state)"


def test_registry_lists_every_builtin_and_ifeval_id() -> None:
    """The default registry has the general checkers and 25 IFEval ids in both modes."""
    names = default_registry().names()
    for general in (
        "regex_must_match",
        "regex_must_not_match",
        "keywords_present",
        "keywords_absent",
        "language",
        "valid_json",
        "json_schema",
        "pydantic_model",
        "length",
        "answer_tag",
        "starts_with",
        "ends_with",
        "letter_case",
        "no_commas",
        "answer_flip",
    ):
        assert general in names
    assert sum(n.startswith("ifeval:") for n in names) == 25
    assert sum(n.startswith("ifeval_loose:") for n in names) == 25
    assert "ifeval:length_constraints:number_words" in names


def test_empty_registry_knows_nothing() -> None:
    """A bare registry builds nothing: the built-ins come only from default_registry()."""
    with pytest.raises(KeyError):
        CheckerRegistry().build("valid_json", {})
