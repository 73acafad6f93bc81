"""Reply shapes the rules must read right: tool calls without text (counted as turns, attributed,
never checked as empty text) and structured-output refusals (the refusal is the text)."""

from __future__ import annotations

from typing import Any

import pytest

from handoffmon.counts import CheckKey, TransitionKey
from handoffmon.pipeline.reply import calls_tools_only, reply_text
from handoffmon.testing import RecordingExporter
from tests.pipeline.helpers import make_config, monitor, turn

RULES = [
    {"name": "short", "check": "length", "params": {"unit": "words", "max": 5}},
    {"name": "says_ok", "check": "regex_must_match", "params": {"pattern": "ok"}},
    {
        "name": "deep_only",
        "check": "length",
        "params": {"unit": "words", "max": 5},
        "scope": {"min_depth": 9},
    },
]
CALL = [{"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}]


def _drive(replies: list[dict[str, Any]], authors: list[str]) -> tuple[RecordingExporter, Any]:
    """One conversation: each reply answers the history so far; a tool result follows a tool call."""
    exp = RecordingExporter()
    with monitor(make_config(rules=RULES), exporters=[exp]) as m:
        history: list[dict[str, Any]] = [{"role": "user", "content": "find x"}]
        for reply, author in zip(replies, authors, strict=True):
            turn(m, history, reply, author)
            history = [*history, reply]
            if reply.get("tool_calls"):
                history.append({"role": "tool", "tool_call_id": "call_1", "content": "x is 42"})
            else:
                history.append({"role": "user", "content": "thanks"})
        assert m.flush(10)
        snap = m.snapshot()
    return exp, snap


def test_a_tool_call_turn_is_counted_and_attributed_but_its_rules_are_not_applicable() -> None:
    replies = [
        {"role": "assistant", "content": "ok"},
        {"role": "assistant", "content": None, "tool_calls": CALL},
        {"role": "assistant", "content": "x is 42, which is far too long"},
    ]
    exp, snap = _drive(replies, ["a", "b", "a"])
    assert [r.context.depth for r in exp.results] == [1, 2, 3]
    calls = exp.results[1]
    assert [(c.rule, c.verdict, c.reason) for c in calls.checks] == [
        ("short", "not_applicable", "tool_calls"),
        ("says_ok", "not_applicable", "tool_calls"),
    ]  # deep_only is out of scope at depth 2: absent, as on any turn
    assert calls.record.author == "b" and calls.record.handoff is True
    # the tool-call message is part of the history: the next turn attributes it to b by the chain
    last = exp.results[2]
    assert last.context.prefix_model == "b" and set(snap.attributions) == {"chain"}
    assert snap.checks[CheckKey("short", "b", "a", "2", "not_applicable")] == 1
    assert not any(k.verdict == "fail" and k.model == "b" for k in snap.checks)
    # the Markov chain skips the tool call: text turn 1 → text turn 3, no pass/fail at depth 2
    assert snap.transitions == {
        TransitionKey("short", "a", "true", "pass", "fail"): 1,
        TransitionKey("says_ok", "a", "true", "pass", "fail"): 1,
    }
    assert snap.monitor_errors == {}


SKIPPED = {"short": "not_applicable", "says_ok": "not_applicable"}


@pytest.mark.parametrize(
    ("reply", "verdicts"),
    [
        ({"role": "assistant", "content": "", "tool_calls": CALL}, SKIPPED),
        ({"role": "assistant", "content": " \n", "tool_calls": CALL}, SKIPPED),
        ({"role": "assistant", "content": [], "tool_calls": CALL}, SKIPPED),
        ({"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}}, SKIPPED),
        # text beside the call is the reply the user sees: checked
        (
            {"role": "assistant", "content": "ok, looking it up", "tool_calls": CALL},
            {"short": "pass", "says_ok": "pass"},
        ),
        # no text and no call is an empty reply, which the rules judge (the default pack's not_empty)
        ({"role": "assistant", "content": ""}, {"short": "pass", "says_ok": "fail"}),
        ({"role": "assistant", "content": None, "tool_calls": []}, {"short": "pass", "says_ok": "fail"}),
    ],
)
def test_only_a_reply_without_text_that_calls_tools_skips_the_rules(
    reply: dict[str, Any], verdicts: dict[str, str]
) -> None:
    exp, _ = _drive([reply], ["a"])
    checks = exp.results[0].checks
    assert {c.rule: c.verdict for c in checks} == verdicts
    skipped = [c.reason for c in checks if c.verdict == "not_applicable"]
    assert skipped == (["tool_calls"] * 2 if verdicts is SKIPPED else [])


def test_per_request_rules_are_not_applicable_too() -> None:
    exp = RecordingExporter()
    with monitor(make_config(rules=RULES), exporters=[exp]) as m:
        meta = {
            "handoffmon": {
                "rules": [{"name": "asked", "check": "regex_must_match", "params": {"pattern": "y"}}]
            }
        }
        turn(
            m,
            [{"role": "user", "content": "find x"}],
            {"role": "assistant", "tool_calls": CALL},
            "a",
            metadata=meta,
        )
        assert m.flush(10)
    assert {c.rule: c.verdict for c in exp.results[0].checks} == {
        "short": "not_applicable",
        "says_ok": "not_applicable",
        "asked": "not_applicable",
    }


class _SDKMessage:
    """An SDK-style message object (attributes, not keys), as litellm and openai return."""

    def __init__(self, content: Any, tool_calls: Any) -> None:
        self.content, self.tool_calls, self.function_call = content, tool_calls, None


def test_calls_tools_only_reads_dicts_and_sdk_objects() -> None:
    assert calls_tools_only(_SDKMessage(None, CALL), "")
    assert not calls_tools_only(_SDKMessage("hi", CALL), "hi")
    assert not calls_tools_only(_SDKMessage(None, None), "")
    assert not calls_tools_only("plain text reply", "")
    assert not calls_tools_only(None, "")


def test_only_text_replies_are_offered_for_shadow_continuation() -> None:
    """A shadow pair compares the served reply's verdicts with a shadow reply's: a reply that
    only calls tools has none, so its turn is not offered (no shadow call is spent on it)."""
    from handoffmon.ingress import Outcome
    from handoffmon.shadow.turns import ShadowOffer, ShadowTurn
    from tests.pipeline.helpers import request

    offered: list[ShadowTurn] = []
    with monitor(make_config(rules=RULES)) as m:
        m.set_shadow(offered.append)
        history: list[dict[str, Any]] = [{"role": "user", "content": "find x"}]
        for reply in (
            {"role": "assistant", "content": None, "tool_calls": CALL},
            {"role": "assistant", "content": "ok"},
        ):
            cap = m.capture(request(m, history))
            offer = ShadowOffer(source=None, messages=list(history))  # type: ignore[arg-type]
            m.finish(cap, reply, Outcome(authors=("a",)), shadow=offer)
            history = [*history, reply, {"role": "tool", "tool_call_id": "call_1", "content": "42"}]
        assert m.flush(10)
    assert len(offered) == 1  # the text reply only
    assert {c.rule: c.verdict for c in offered[0].served} == {"short": "pass", "says_ok": "pass"}


def test_a_structured_output_refusal_is_the_text_the_rules_judge() -> None:
    """Structured outputs answer a refusal in ``refusal`` with ``content`` null: that is what the
    user is shown, so the rules read it (an empty string would pass a no-refusal rule)."""
    refusal = "I'm sorry, but I can't help with that."
    exp, _ = _drive([{"role": "assistant", "content": None, "refusal": refusal}], ["a"])
    verdicts = {c.rule: c.verdict for c in exp.results[0].checks}
    assert verdicts == {"short": "fail", "says_ok": "fail"}  # 8 words; no "ok" in it
    exp, _ = _drive([{"role": "assistant", "content": None, "refusal": "ok, no"}], ["a"])
    assert {c.rule: c.verdict for c in exp.results[0].checks} == {"short": "pass", "says_ok": "pass"}
    assert reply_text(_SDKRefusal(refusal)) == refusal and reply_text({"content": "x", "refusal": "y"}) == "x"


class _SDKRefusal:
    def __init__(self, refusal: str) -> None:
        self.content, self.refusal = None, refusal
