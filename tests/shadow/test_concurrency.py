"""The shadow budget under concurrency: many check workers offering at once, calls settling on
the shadow threads meanwhile; no limit is ever passed and every offer is accounted once."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from typing import Any

from handoffmon.config import ShadowConfig
from handoffmon.runtime.shadow import ShadowRunner
from handoffmon.shadow.turns import ShadowOffer, ShadowReply, ShadowTurn, prompt_bytes
from handoffmon.types import CheckResult

PRICES = (1e-6, 4e-6)
BYTES = 2_000
"""Each offered history's JSON bytes (about): its upper bound is ~2,000 + 8 + 256 tokens."""


class _Target:
    """A shadow target answering after 0–3 ms with a random share of the bound used; records
    how many calls are in flight at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inflight = self.peak = self.calls = 0
        self.rng = random.Random(3)

    def call(self, target: str, messages: list[Any], *, max_tokens: int, timeout_s: float) -> ShadowReply:
        with self.lock:
            self.inflight += 1
            self.calls += 1
            self.peak = max(self.peak, self.inflight)
            share = self.rng.uniform(0.2, 1.0)
        time.sleep(self.rng.random() * 0.003)
        with self.lock:
            self.inflight -= 1
        prompt = prompt_bytes(messages) + 4 * len(messages)  # the budget's bound of the input
        return ShadowReply(
            "ok", target, share * (prompt + max_tokens), share * (prompt * PRICES[0] + max_tokens * PRICES[1])
        )

    def candidates(self, model: str) -> Sequence[str]:
        return ("b",)

    def prices(self, model: str) -> tuple[float, float] | None:
        return PRICES


def _turn(target: _Target, i: int) -> ShadowTurn:
    messages = [
        {"role": "user", "content": "x" * (BYTES - 200)},
        {"role": "assistant", "content": "y"},
        {"role": "user", "content": f"turn {i}"},
    ]
    served = (CheckResult("r", "pass"),)
    return ShadowTurn(
        ShadowOffer(target, messages), f"conv-{i}", "a", "a", served, lambda _t: (CheckResult("r", "fail"),)
    )


def test_eight_threads_offering_at_once_never_pass_a_limit() -> None:
    """8 threads offer 1,600 turns within a second against 40 calls/min, 30,000 tokens/h and
    $0.05/day (each call's bound ~$0.005): every call was admitted within the limits — calls,
    reserved tokens and money never above them, whatever order the settles came in — and each
    offer is either a call or one skip."""
    cfg = ShadowConfig(
        enabled=True, targets=["b"], sample_rate=1.0, calls_per_minute=40, tokens_per_hour=30_000,
        usd_per_day=0.05, pair_calls_per_hour=1000, max_output_tokens=256, max_concurrency=8,
        queue_size=512,
    )  # fmt: skip
    target = _Target()
    runner = ShadowRunner(cfg)
    barrier = threading.Barrier(8)

    def offer(k: int) -> None:
        barrier.wait()
        for i in range(k, 1600, 8):
            runner.offer(_turn(target, i))

    seen: list[dict[str, float]] = []
    done = threading.Event()

    def watch() -> None:  # the windows at every moment, not only at the end
        while not done.is_set():
            seen.append(runner.policy.budget.usage()[0])

    threads = [threading.Thread(target=offer, args=(k,)) for k in range(8)]
    watcher = threading.Thread(target=watch)
    watcher.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert runner.flush(10)
    done.set()
    watcher.join()
    assert len(seen) > 10
    assert max(u["calls"] for u in seen) <= 40
    assert max(u["tokens"] for u in seen) <= 30_000
    assert max(u["usd"] for u in seen) <= 0.05
    stats = runner.stats
    runner.close(5)
    made = sum(stats.calls.values())
    assert made == target.calls == stats.calls[("no_handoff", "ok")]
    assert made + sum(stats.skipped.values()) == 1600
    assert 0 < made <= 40
    assert stats.budget_used["calls"] <= 40
    assert stats.budget_used["tokens"] <= 30_000 and stats.tokens <= 30_000
    assert stats.budget_used["usd"] <= 0.05 and stats.usd <= 0.05
    assert target.peak <= 8
    assert stats.pairs == {"no_handoff": made}
