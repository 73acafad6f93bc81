"""Sync path: threads on the wrapped Router's completion (plain and streamed) are attributed and checked."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from handoffmon.integrations.router import RouterWrapper
from handoffmon.pipeline.monitor import Monitor
from handoffmon.sim.demo import DemoSettings, demo_config
from handoffmon.sim.fleet import default_fleet
from handoffmon.sim.provider import SimProvider
from handoffmon.sim.router import build_router, unregister_provider


def test_threads_on_sync_completion_are_attributed_and_checked_like_the_simulator_intended() -> None:
    """4 threads, 12 conversations x 4 turns, every other one streamed: all counted, verdicts = intents."""
    fleet = default_fleet()
    provider = SimProvider(fleet, seed=9, record=True)
    router = build_router(fleet, provider)
    monitor = Monitor(demo_config(fleet, provider.provider_name or "", DemoSettings()))
    client = RouterWrapper(router, monitor)
    groups = fleet.groups

    def conversation(i: int) -> None:
        messages = [{"role": "system", "content": f"customer {i}"}]
        for depth in range(4):
            messages.append({"role": "user", "content": "Where is my order?"})
            group = groups[(i + depth) % len(groups)]  # a new group every turn: all handoffs
            if depth % 2:
                text = "".join(
                    c.choices[0].delta.content or ""
                    for c in client.completion(model=group, messages=messages, stream=True)
                )
            else:
                text = client.completion(model=group, messages=messages).choices[0].message.content
            messages.append({"role": "assistant", "content": text})

    try:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(conversation, range(12)))
        monitor.flush()
        counts = monitor.snapshot()
    finally:
        monitor.close()
        unregister_provider(provider.provider_name or "")
    assert counts.total_turns == 48 == len(provider.truth)
    # a new group every turn; a fallback may land back on the previous author (no handoff then)
    sim_handoffs = sum(1 for t in provider.truth if t.prefix is not None and t.prefix != t.author)
    assert sum(n for k, n in counts.turns.items() if k.handoff == "true") == sim_handoffs >= 30
    intended = Counter(
        (r, t.author, "pass" if ok else "fail") for t in provider.truth for r, ok in t.intent.items()
    )
    counted: Counter[tuple[str, str, str]] = Counter()
    for key, n in counts.checks.items():
        counted[(key.rule, key.model, key.verdict)] += n
    assert counted == intended
