"""The check stage's state cache (memory store): same verdicts, transitions and sums as reloading.

The last state written per conversation is kept built and reused while the store still holds
exactly that write (by identity); any other write, an expiry or an eviction reloads it.
"""

from __future__ import annotations

from typing import Any

import pytest

from handoffmon.pipeline.monitor import Monitor
from handoffmon.pipeline.state import ConversationState
from handoffmon.stores.memory import MemoryStore
from tests.pipeline.helpers import RecordingExporter, make_config, monitor, run_conversation, turn

RULES = [
    {"name": "short", "check": "length", "params": {"unit": "words", "max": 5}},
    {"name": "ring", "check": "regex_must_match", "params": {"pattern": "(?i)ring"}},
]
REPLIES = ["ring one", "a reply that is much too long to be short", "ring", "no", "ring ring", "x " * 9]


class _Uncached(MemoryStore):
    """A memory store of another type: the check stage reloads every state."""


def _observed(m: Monitor, exp: RecordingExporter) -> list[tuple[Any, ...]]:
    return [
        (
            r.context.conversation_id,
            r.context.depth,
            r.checks and [(c.rule, c.verdict) for c in r.checks],
            r.transitions,
            r.cluster,
            r.clean,
        )
        for r in exp.results
    ]


def _run(store: MemoryStore, between: Any = None) -> tuple[list[tuple[Any, ...]], Any]:
    exp = RecordingExporter()
    m = monitor(make_config(rules=RULES), store=store, exporters=[exp])
    assert m._checks._stored is (type(store) is MemoryStore)
    for i, authors in enumerate((["a", "a", "b", "a", "b", "b"], ["b", "b", "b", "a", "a", "a"])):
        run_conversation(m, authors, REPLIES, user=f"conversation {i}")
        m.flush(10)
        if between is not None:
            between(m, exp)
    m.close(10)
    return _observed(m, exp), m.snapshot()


def test_cached_states_give_what_reloaded_states_give(monkeypatch: pytest.MonkeyPatch) -> None:
    rebuilt: list[object] = []
    original = ConversationState.from_mapping.__func__  # type: ignore[attr-defined]

    def counting(cls: type[ConversationState], data: Any) -> ConversationState:
        if data:
            rebuilt.append(data)
        return original(cls, data)  # type: ignore[no-any-return]

    monkeypatch.setattr(ConversationState, "from_mapping", classmethod(counting))
    cached = _run(MemoryStore())
    hits = 10 - len(rebuilt)  # 12 turns: 10 find a state, every one of them in the cache
    rebuilt.clear()
    uncached = _run(_Uncached())
    assert (hits, len(rebuilt)) == (10, 10)
    assert cached == uncached
    assert any(transitions for _, _, _, transitions, _, _ in cached[0])


def test_a_state_written_by_someone_else_is_reloaded() -> None:
    """Resetting each finished conversation's state in the store (another writer) is seen."""

    def reset(m: Monitor, exp: RecordingExporter) -> None:
        cid = exp.results[-1].context.conversation_id
        m.store.put_state(cid, ConversationState().to_mapping())
        run_conversation(m, ["a", "a"], REPLIES[:2], user=f"again {len(exp.results)}")
        m.flush(10)

    cached, uncached = _run(MemoryStore(), reset), _run(_Uncached(), reset)
    assert cached == uncached


def test_an_evicted_conversation_starts_afresh() -> None:
    """With room for one conversation, interleaving two evicts their states: no stale reuse."""
    results = []
    for store in (MemoryStore(max_conversations=1), _Uncached(max_conversations=1)):
        exp = RecordingExporter()
        m = monitor(make_config(rules=RULES), store=store, exporters=[exp])
        for depth in range(3):
            for user in ("first", "second"):
                history: list[dict[str, Any]] = [{"role": "user", "content": user}]
                for k in range(depth):
                    history += [
                        {"role": "assistant", "content": REPLIES[k]},
                        {"role": "user", "content": f"n{k}"},
                    ]
                turn(m, history, {"role": "assistant", "content": REPLIES[depth]}, "a")
                m.flush(10)
        m.close(10)
        results.append(_observed(m, exp))
    assert results[0] == results[1]
