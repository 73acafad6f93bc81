"""Request-declared rules through the Monitor: bounded state, counted rejections, no answer text stored."""

from __future__ import annotations

import json
import uuid
from typing import Any

from handoffmon.pipeline.monitor import Monitor
from tests.conftest import require_redis
from tests.pipeline.helpers import RecordingExporter, make_config, monitor, run_conversation, turn

ANSWERS = ("Canberra is the capital", "Sydney is the capital")


def _flip_conversation(m: Monitor, conversation: str) -> None:
    """Two turns: a per-request answer_flip rule, an answer, a challenge, a changed answer."""
    rule = {"name": "flip", "check": "answer_flip"}
    history: list[dict[str, Any]] = [{"role": "user", "content": "Capital of Australia?"}]
    for answer, user_next in zip(ANSWERS, ("Are you sure?", "thanks"), strict=True):
        reply = f"I think <answer>{answer}</answer>."
        meta = {"conversation_id": conversation, "handoffmon": {"rules": [rule]}}
        turn(m, history, {"role": "assistant", "content": reply}, "a", metadata=meta)
        history += [{"role": "assistant", "content": reply}, {"role": "user", "content": user_next}]


def test_answer_flip_state_in_redis_holds_no_reply_text() -> None:
    """Issue 17: a per-request answer_flip rule must not put reply excerpts in Redis in clear.
    Every key the monitor wrote holds no part of either answer, and the flip is still seen."""
    require_redis()
    import redis

    prefix = f"hm-test:{uuid.uuid4().hex}:"
    config = make_config(
        rules=[],
        store={"backend": "redis", "key_prefix": prefix, "ttl_s": 300},
        rule_state={"hash_key": "k" * 32},
    )
    exp = RecordingExporter()
    client = redis.Redis(host="127.0.0.1", port=6379)
    try:
        with Monitor(config, exporters=[exp]) as m:
            _flip_conversation(m, f"conv-{uuid.uuid4().hex}")
            assert m.flush(10)
        keys = list(client.scan_iter(match=f"{prefix}*"))
        states = [k for k in keys if k.decode().startswith(f"{prefix}s:")]
        assert len(states) == 1
        for key in keys:
            value = client.get(key) or b""
            for answer in ANSWERS:
                assert answer.split()[0].lower().encode() not in value.lower(), key
        stored = json.loads(client.get(states[0]) or b"{}")
        assert stored["previous"]["flip"].startswith("fp1:")
    finally:
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)
        client.close()
    assert [(r.checks[0].verdict, r.checks[0].reason) for r in exp.results] == [
        ("not_applicable", "no_previous_answer"),
        ("fail", "answer_flipped"),
    ]


def test_memory_store_state_is_fingerprinted_too() -> None:
    """The same holds for the in-process store (its state is what a SQLite/Redis store would get)."""
    exp = RecordingExporter()
    with monitor(make_config(rules=[]), exporters=[exp]) as m:
        conversation = f"conv-{uuid.uuid4().hex}"
        _flip_conversation(m, conversation)
        assert m.flush(10)
        state = m.store.get_state(exp.results[-1].context.conversation_id)
    assert state is not None and "anberra" not in json.dumps(state) and "ydney" not in json.dumps(state)
    assert exp.results[-1].checks[0].verdict == "fail"


def test_name_flood_is_rejected_counted_and_state_stays_bounded() -> None:
    """One conversation declaring 16 new names every turn for 20 turns: it keeps at most
    max_per_conversation, the rest is rejected and counted, and the configured rule runs every turn."""
    turns = 20
    meta = [
        {
            "conversation_id": "flood",
            "handoffmon": {"rules": [{"name": f"t{t}_r{i}", "check": "no_commas"} for i in range(16)]},
        }
        for t in range(turns)
    ]
    exp = RecordingExporter()
    with monitor(make_config(request_rules={"max_per_conversation": 32}), exporters=[exp]) as m:
        run_conversation(m, ["a"] * turns, metadata=meta)
        assert m.flush(20)
        snap = m.snapshot()
        state = m.store.get_state(exp.results[-1].context.conversation_id)
        rejections = m.rules.request_rejections
    assert state is not None and len(state["rules"]) == 32  # type: ignore[arg-type]
    assert len(state["last"]) <= 33  # type: ignore[arg-type]
    assert snap.monitor_errors == {"rules": turns - 2} and rejections == {"conversation_full": turns - 2}
    assert all(r.checks[0].rule == "short" for r in exp.results) and len(exp.results) == turns
    assert [len(r.checks) for r in exp.results] == [17] + [33] * (turns - 1)
