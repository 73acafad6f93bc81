"""Traffic driver: many concurrent simulated conversations through any async chat client.

Conversation lengths follow a mix of a geometric (short support chats) and a
discretized lognormal (long working sessions). Each conversation starts on a model
group and, at every later turn, the application may route it to another group (an
explicit routing change: escalation, cost routing, an A/B split); the router's
fallbacks add further handoffs when injected failures hit. User messages come from
``scripts``; they shape the conversation text but not the planted probabilities (the
planted p_TF already stands for derails), so the Markov truth stays exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from handoffmon.sim.fleet import Fleet
from handoffmon.sim.scripts import ScriptLibrary


@dataclass(frozen=True)
class TrafficPolicy:
    """Shape of the simulated traffic.

    Attributes:
        short_share: share of conversations drawn from the geometric component.
        short_mean: mean length of the geometric component.
        long_median: median length of the lognormal component.
        long_sigma: log-scale spread of the lognormal component.
        max_turns: hard cap on conversation length.
        switch_rate: per-turn probability that the application routes the
            conversation to a different model group.
        stream_share: share of calls made with ``stream=True``.
        group_weights: start-group weights (default: uniform).
        think_s: pause before each later turn (a user reading the reply); 0 = none.
    """

    short_share: float = 0.4
    short_mean: float = 3.0
    long_median: float = 9.0
    long_sigma: float = 0.6
    max_turns: int = 40
    switch_rate: float = 0.3
    stream_share: float = 0.2
    group_weights: tuple[float, ...] = ()
    think_s: float = 0.0

    def length(self, rng: np.random.Generator) -> int:
        """Draw one conversation length (assistant turns)."""
        if rng.random() < self.short_share:
            n = int(rng.geometric(1.0 / self.short_mean))
        else:
            n = round(float(rng.lognormal(np.log(self.long_median), self.long_sigma)))
        return int(min(max(n, 1), self.max_turns))

    def mean_length(self, draws: int = 20_000, seed: int = 0) -> float:
        """Monte-Carlo mean length (used to size runs in turns)."""
        rng = np.random.default_rng(seed)
        return float(np.mean([self.length(rng) for _ in range(draws)]))


@dataclass
class DriveStats:
    """What the driver saw (the application's view; handoffmon learns authorship on its own).

    Attributes:
        conversations: conversations finished.
        turns: assistant replies received.
        failed_turns: calls that raised after all fallbacks (the conversation ends).
        streamed: replies received as streams.
        fallbacks: replies served after at least one router fallback.
        route_changes: turns the application sent to a different group than the previous turn.
        authors: replies per serving deployment.
        elapsed_s: wall time of the run.
    """

    conversations: int = 0
    turns: int = 0
    failed_turns: int = 0
    streamed: int = 0
    fallbacks: int = 0
    route_changes: int = 0
    authors: Counter[str] = field(default_factory=Counter)
    elapsed_s: float = 0.0


async def _collect_stream(stream: Any) -> tuple[str, Any]:
    parts: list[str] = []
    last = None
    async for chunk in stream:
        last = chunk
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
    return "".join(parts), last


SAFE_POINT_GC = sys.version_info < (3, 12)
"""Collect garbage only at the driver's own safe points, never automatically (CPython < 3.12).

There, the cyclic collector can start inside ``ContextVar.set``, and LiteLLM's
``CustomStreamWrapper.__del__`` (a finalizer it runs) sets a ContextVar of the same
context: a use-after-free that crashes the process (CPython gh-148891;
docs/operations/known-issues.md). The simulator streams through LiteLLM's async Router, so
while it drives traffic automatic collection is off and :func:`collect_at_safe_point` runs
the collections the thresholds call for between turns, where no ``ContextVar.set`` is under
way. ``python -m tests.reliability.hamt_repro`` crashes without this and survives with it."""


@contextlib.contextmanager
def _safe_point_gc() -> Iterator[None]:
    """Automatic collection off while inside (a no-op where it is safe, or already off)."""
    if not SAFE_POINT_GC or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def collect_at_safe_point() -> None:
    """The collection the thresholds call for, as the interpreter would have run it, here:
    generation 0 once its allocations pass its threshold, the older ones as their counts do."""
    if not SAFE_POINT_GC or gc.isenabled():
        return
    t0, t1, t2 = gc.get_threshold()
    c0, c1, c2 = gc.get_count()
    if t0 and c0 > t0:
        gc.collect(2 if c2 > t2 else 1 if c1 > t1 else 0)


def _served_by(response: Any) -> tuple[str | None, int]:
    """(deployment id, fallbacks taken) from litellm's hidden params, when present."""
    hidden = getattr(response, "_hidden_params", None) or {}
    headers = hidden.get("additional_headers") or {}
    return hidden.get("model_id"), int(headers.get("x-litellm-attempted-fallbacks") or 0)


@dataclass
class Driver:
    """Runs simulated conversations against ``client.acompletion`` (a Router or a wrapper).

    Args:
        client: anything with litellm's ``acompletion(model=, messages=, stream=, ...)``.
        fleet: the fleet (for group names and the system prompt's rules).
        seed: seeds every conversation (conversation ``i`` uses ``[seed, i]``).
        policy: traffic shape.
        scripts: user-message library.
        concurrency: conversations in flight at once.
        on_turn: called after every reply (progress bars).
        conversation_ids: pass ``metadata={"conversation_id": ...}``; otherwise
            handoffmon must derive conversation ids itself.
    """

    client: Any
    fleet: Fleet
    seed: int = 0
    policy: TrafficPolicy = field(default_factory=TrafficPolicy)
    scripts: ScriptLibrary = field(default_factory=ScriptLibrary)
    concurrency: int = 32
    on_turn: Callable[[], None] | None = None
    conversation_ids: bool = False
    stats: DriveStats = field(default_factory=DriveStats)
    _stop: asyncio.Event | None = field(default=None, repr=False)

    def _start_group(self, rng: np.random.Generator) -> str:
        groups = self.fleet.groups
        w = np.asarray(self.policy.group_weights or [1.0] * len(groups), dtype=float)
        return groups[int(rng.choice(len(groups), p=w / w.sum()))]

    def _next_group(self, group: str, rng: np.random.Generator) -> str:
        if rng.random() >= self.policy.switch_rate:
            return group
        others = [g for g in self.fleet.groups if g != group]
        self.stats.route_changes += 1
        return others[int(rng.integers(len(others)))]

    async def _call(self, group: str, messages: list[dict[str, str]], stream: bool, conv: int) -> str:
        kwargs: dict[str, Any] = {"model": group, "messages": messages}
        if self.conversation_ids:
            kwargs["metadata"] = {"conversation_id": f"sim-{self.seed}-{conv}"}
        if stream:
            text, last = await _collect_stream(await self.client.acompletion(stream=True, **kwargs))
            self.stats.streamed += 1
            response = last
        else:
            response = await self.client.acompletion(**kwargs)
            text = response.choices[0].message.content or ""
        author, fallbacks = _served_by(response)
        if author is None and response is not None:
            author = getattr(response, "model", None)
        self.stats.authors[str(author)] += 1
        self.stats.fallbacks += int(fallbacks > 0)
        return text

    async def conversation(self, index: int) -> None:
        """Run conversation ``index`` to its drawn length (or its first unrecoverable failure)."""
        rng = np.random.default_rng([self.seed, index])
        length = self.policy.length(rng)
        messages = [{"role": "system", "content": self.scripts.system_prompt(self.fleet, index, rng)}]
        group = self._start_group(rng)
        for depth in range(1, length + 1):
            if self._stop is not None and self._stop.is_set():
                break  # shutting down: leave mid-conversation, like a user closing the tab
            if depth > 1:
                group = self._next_group(group, rng)
                if self.policy.think_s:
                    await asyncio.sleep(self.policy.think_s)
            messages.append({"role": "user", "content": self.scripts.user_message(depth, rng)})
            stream = bool(rng.random() < self.policy.stream_share)
            try:
                text = await self._call(group, messages, stream, index)
            except Exception:  # the router gave up after its fallbacks: the user leaves
                self.stats.failed_turns += 1
                break
            finally:
                collect_at_safe_point()
            messages.append({"role": "assistant", "content": text})
            self.stats.turns += 1
            if self.on_turn is not None:
                self.on_turn()
        self.stats.conversations += 1

    async def run(
        self, conversations: int, *, start: int = 0, stop: asyncio.Event | None = None
    ) -> DriveStats:
        """Run ``conversations`` conversations (indices ``start…``), ``concurrency`` at a time.

        Args:
            conversations: how many to run.
            start: first conversation index (continuing traffic uses fresh indices).
            stop: when set, no new conversation starts and running ones end after their
                current turn.
        """
        t0 = time.perf_counter()
        self._stop = stop
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(start, start + conversations):
            queue.put_nowait(i)

        async def worker() -> None:
            while not queue.empty() and not (stop is not None and stop.is_set()):
                await self.conversation(queue.get_nowait())

        with _safe_point_gc():
            await asyncio.gather(*(worker() for _ in range(max(1, min(self.concurrency, conversations)))))
        self.stats.elapsed_s += time.perf_counter() - t0
        return self.stats
