"""No loss: 10,000 turns from 8 concurrent async tasks through the wrapper; close() accounts for all."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from handoffmon.integrations.router import RouterWrapper
from tests.integrations.zero_router import ZeroLatencyRouter
from tests.pipeline.helpers import make_config, monitor

TASKS = 8
CONVERSATIONS_PER_TASK = 125
TURNS = 10  # 8 x 125 x 10 = 10,000 turns


async def _task(wrapped: Any, task: int) -> None:
    for conv in range(CONVERSATIONS_PER_TASK):
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"task {task} conversation {conv}"}]
        for turn in range(TURNS):
            group = "g1" if (turn // 3) % 2 == 0 else "g2"  # the author switches every three turns
            response = await wrapped.acompletion(model=group, messages=messages)
            messages += [
                {"role": "assistant", "content": response.choices[0].message.content},
                {"role": "user", "content": f"turn {turn}"},
            ]
            if turn % 4 == 0:
                await asyncio.sleep(0)  # interleave the tasks


@pytest.mark.slow
async def test_ten_thousand_turns_from_eight_tasks_are_all_counted() -> None:
    """Every turn reaches the aggregates exactly once: turns, checks, transitions and attributions."""
    router = ZeroLatencyRouter({"g1": ("dep-1", "openai/m1"), "g2": ("dep-2", "openai/m2")})
    # The zero-latency router produces turns faster than the checks run, and how far the
    # workers fall behind depends on the machine's load. The queue holds the whole run so
    # this test pins loss and accounting; drops under a full queue are pinned elsewhere.
    m = monitor(
        make_config(
            pipeline={
                "workers": 2,
                "queue_size": 2 * TASKS * CONVERSATIONS_PER_TASK * TURNS,
                "attribution_queue_size": 2 * TASKS * CONVERSATIONS_PER_TASK * TURNS,
            }
        )
    )
    wrapped = RouterWrapper(router, m)
    await asyncio.gather(*(_task(wrapped, t) for t in range(TASKS)))
    m.close(60)
    snap = m.snapshot()
    total = TASKS * CONVERSATIONS_PER_TASK * TURNS
    conversations = TASKS * CONVERSATIONS_PER_TASK
    assert snap.dropped == 0 and snap.monitor_errors == {}
    assert snap.total_turns == total
    assert sum(snap.checks.values()) == total  # one configured rule, checked on every reply
    assert sum(snap.transitions.values()) == total - conversations
    assert snap.attributions == {"chain": conversations * sum(range(TURNS))}
    by_depth: dict[str, int] = {}
    for key, n in snap.turns.items():
        by_depth[key.depth_bucket] = by_depth.get(key.depth_bucket, 0) + n
    assert by_depth == {
        "1": conversations,
        "2": conversations,
        "3-4": 2 * conversations,
        "5-8": 4 * conversations,
        "9-12": 2 * conversations,
    }
    assert snap.session_lengths == {TURNS: conversations}
    handoffs = sum(n for k, n in snap.turns.items() if k.handoff == "true")
    assert handoffs == 3 * conversations  # switches at turns 4, 7 and 10 (1-based)
