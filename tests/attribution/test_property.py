"""Property: replayed random multi-model conversations are attributed exactly as they happened.

Several conversations are interleaved turn by turn through one Attributor (attribute →
record → persist, with persists lagging behind as a background worker would). Random
client-side edits of earlier assistant messages must make exactly those messages
``unknown`` and change nothing else; front truncation must keep authors and depth.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from handoffmon.attribution import Attributor, RecordedReply, normalize_message
from handoffmon.attribution.fingerprint import DEFAULT_MIN_CONTENT_CHARS, message_digest
from handoffmon.stores.memory import MemoryStore
from handoffmon.types import TurnContext

MODELS = ("gpt-4o", "claude", "llama")
SHORT = ("Sure!", "OK.", "Yes.", "No.")


@dataclass(frozen=True)
class Turn:
    authors: tuple[str, ...]
    kind: str  # long | short | tool
    words: str


@dataclass
class Conversation:
    cid: int
    turns: list[Turn]
    history: list[dict[str, Any]] = field(default_factory=list)
    truth: list[tuple[tuple[str, ...], int] | None] = field(default_factory=list)  # None = edited
    ids: set[str] = field(default_factory=set)
    last_id: str = ""
    done: int = 0


_authors = st.one_of(
    st.sampled_from(MODELS).map(lambda m: (m,)),
    st.permutations(MODELS).map(lambda p: (p[0], p[1])),  # mid-stream fallback: two authors
)
_turn = st.builds(
    Turn,
    _authors,
    st.sampled_from(["long", "long", "short", "tool"]),
    st.text(alphabet="abc de", min_size=0, max_size=12),
)


@st.composite
def _scenario(draw: st.DrawFn) -> tuple[list[Conversation], list[int], list[tuple[bool, int, int]]]:
    convs = [
        Conversation(c, draw(st.lists(_turn, min_size=1, max_size=7))) for c in range(draw(st.integers(1, 3)))
    ]
    schedule = draw(st.permutations([c.cid for c in convs for _ in c.turns]))
    # per step: (edit an earlier reply?, which one (modulo), how many queued persists to run)
    steps = draw(
        st.lists(
            st.tuples(st.booleans(), st.integers(0, 50), st.integers(0, 2)),
            min_size=len(schedule),
            max_size=len(schedule),
        )
    )
    return convs, schedule, steps


def _reply(conv: Conversation, k: int, turn: Turn) -> dict[str, Any]:
    if turn.kind == "short":
        return {"role": "assistant", "content": SHORT[(k + conv.cid) % len(SHORT)]}
    if turn.kind == "tool":
        call = {
            "id": f"call_{conv.cid}_{k}",
            "type": "function",
            "function": {"name": "f", "arguments": "{}"},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"role": "assistant", "content": f"Long answer {conv.cid}.{k} about {turn.words} with details."}


def _check(ctx: TurnContext, conv: Conversation, author: str) -> None:
    assert len(ctx.attributions) == len(conv.truth)
    for got, truth in zip(ctx.attributions, conv.truth, strict=True):
        if truth is None:
            assert (got.author, got.method) == ("unknown", "unknown")
        else:
            assert (got.authors, got.author, got.depth) == (truth[0], truth[0][-1], truth[1])
            assert got.method in ("chain", "content")
    assert ctx.depth == len(conv.truth) + 1
    if not conv.truth:
        assert ctx.prefix_model == "none" and ctx.handoff_for(author) is False
    elif conv.truth[-1] is None:
        assert ctx.prefix_model == "unknown" and ctx.handoff_for(author) is None
    else:
        assert ctx.prefix_model == conv.truth[-1][0][-1]
        assert ctx.handoff_for(author) is (conv.truth[-1][0][-1] != author)


def _edit(conv: Conversation, which: int, step: int) -> None:
    positions = [i for i, m in enumerate(conv.history) if m["role"] == "assistant"]
    if not positions:
        return
    j = which % len(positions)
    conv.history[positions[j]] = {"role": "assistant", "content": f"client rewrote this reply ({step})"}
    conv.truth[j] = None


def _play(
    attributor: Attributor, convs: list[Conversation], schedule: list[int], steps: list[tuple[bool, int, int]]
) -> None:
    queue: list[RecordedReply] = []
    for step, (cid, (edit, which, persists)) in enumerate(zip(schedule, steps, strict=True)):
        conv = convs[cid]
        k, turn = conv.done, conv.turns[conv.done]
        if edit and k:
            _edit(conv, which, step)
        conv.history.append({"role": "user", "content": f"user {cid}.{k}: {turn.words}"})
        ctx = attributor.attribute(conv.history)
        _check(ctx, conv, turn.authors[-1])
        if any(t is not None for t in conv.truth):  # the id changes only if nothing is attributable
            assert ctx.conversation_id == conv.last_id
        recorded = attributor.record(ctx, _reply(conv, k, turn), turn.authors)
        conv.last_id = recorded.conversation_id
        conv.ids.add(recorded.conversation_id)
        queue.append(recorded)
        for _ in range(min(persists, len(queue))):
            attributor.persist(queue.pop(0))
        conv.history.append(_reply(conv, k, turn))
        conv.truth.append((turn.authors, k + 1))
        conv.done += 1
    for recorded in queue:
        attributor.persist(recorded)


@settings(max_examples=150, deadline=None)
@given(_scenario())
def test_replayed_conversations_attribute_true_author_depth_and_handoff(
    scenario: tuple[list[Conversation], list[int], list[tuple[bool, int, int]]],
) -> None:
    """True authors, depths and handoff flags at every turn; edited replies (only) are unknown.

    The conversation id stays the same while any earlier reply is attributable, and no
    two conversations ever share an id.
    """
    convs, schedule, steps = scenario
    attributor = Attributor(MemoryStore())
    _play(attributor, convs, schedule, steps)
    all_ids = [i for c in convs for i in c.ids]
    assert len(all_ids) == len(set(all_ids))
    if not any(edit for edit, _, _ in steps):
        assert all(len(c.ids) == 1 for c in convs)


@settings(max_examples=100, deadline=None)
@given(_scenario(), st.integers(0, 30))
def test_front_truncated_histories_keep_authors_and_depth(
    scenario: tuple[list[Conversation], list[int], list[tuple[bool, int, int]]], cut: int
) -> None:
    """After dropping a prefix, each remaining reply keeps its author and depth by content.

    The one exception is a short reply (text or a small tool call) whose prompt was cut
    away (it starts the history): its content key is bound to that prompt, so it is
    honestly ``unknown``.
    """
    convs, schedule, steps = scenario
    steps = [(False, w, p) for _, w, p in steps]
    attributor = Attributor(MemoryStore())
    _play(attributor, convs, schedule, steps)
    for conv in convs:
        drop = min(cut, len(conv.history) - 1)
        kept = conv.history[drop:]
        ctx = attributor.attribute([*kept, {"role": "user", "content": "and now?"}])
        truths = conv.truth[len(conv.truth) - len(ctx.attributions) :]
        for got, truth in zip(ctx.attributions, truths, strict=True):
            assert truth is not None
            if got.index == 0 and message_digest(normalize_message(kept[0]))[1] < DEFAULT_MIN_CONTENT_CHARS:
                assert got.author == "unknown"
            else:
                assert (got.authors, got.depth, got.method) == (
                    truth[0],
                    truth[1],
                    "content" if drop else "chain",
                )
        assert ctx.depth == len(conv.truth) + 1 or ctx.attributions[-1].author == "unknown"
