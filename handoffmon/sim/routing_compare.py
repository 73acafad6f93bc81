"""``demo --compare-routing``: the same conversations run twice — router's fallback order vs risk-aware.

Warm-up traffic is refit and its pair-risk table published; then two fresh worlds (same
fleet, same seeds, fresh conversations) run the same conversations, one with routing off
(the router's own order) and one enforcing the risk-aware order. Conversation ``i`` draws
its start group, user messages and route changes from ``[seed, i]`` in both runs, and
every reply and injected failure from ``(seed, history, model, attempt)``, so the runs are
identical up to the first fallback the policy reorders; they are paired by conversation.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from handoffmon.config import RoutingConfig
from handoffmon.refit.result import RefitResult
from handoffmon.routing import PairRiskTable
from handoffmon.routing.compare import ArmTotals, RoutingComparison, paired_difference
from handoffmon.sim.demo import DemoSettings, build_world, close_world
from handoffmon.sim.driver import Driver, DriveStats
from handoffmon.sim.dynamics import Dynamics
from handoffmon.sim.fleet import Fleet
from handoffmon.types import TurnResult

THINK_S = 0.05
"""The simulated user's pause between turns: attribution runs behind the request path, so a
zero-latency simulator that sends the next turn at once would outrun it (``no_prefix``)."""

COMPARE_ROUTING = RoutingConfig(enabled=True, mode="enforce", return_home=False)
"""The risk-aware arm's policy: default thresholds, risk ordering alone (no return-home)."""


@dataclass(frozen=True)
class Call:
    """One answered request as the application saw it."""

    conversation: str
    depth: int
    group: str
    author: str
    fallbacks: int
    cost_usd: float
    text: str


class _RecordingClient:
    """Sits between the driver and the wrapped router; keeps what each answered call returned."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[Call] = []

    async def acompletion(self, **kwargs: Any) -> Any:
        messages = kwargs["messages"]
        response = await self.inner.acompletion(**kwargs)
        hidden = getattr(response, "_hidden_params", None) or {}
        headers = hidden.get("additional_headers") or {}
        self.calls.append(
            Call(
                conversation=kwargs["metadata"]["conversation_id"],
                depth=1 + sum(1 for m in messages if m.get("role") == "assistant"),
                group=kwargs["model"],
                author=str(hidden.get("model_id")),
                fallbacks=int(headers.get("x-litellm-attempted-fallbacks") or 0),
                cost_usd=float(hidden.get("response_cost") or 0.0),
                text=response.choices[0].message.content or "",
            )
        )
        return response


class _Verdicts:
    """Exporter keeping (conversation id, depth) → {rule: verdict} of every checked turn."""

    def __init__(self) -> None:
        self.turns: dict[tuple[str, int], dict[str, str]] = {}

    def export(self, result: TurnResult) -> bool:
        key = (result.context.conversation_id, result.context.depth)
        self.turns[key] = {c.rule: c.verdict for c in result.checks}
        return True

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        return True

    def shutdown(self) -> None:
        return None


@dataclass
class ArmRun:
    """Everything one run produced."""

    calls: list[Call]
    verdicts: dict[tuple[str, int], dict[str, str]]
    truth: dict[tuple[str, str, int], Any]
    stats: DriveStats
    decisions: dict[str, int] = field(default_factory=dict)


def run_arm(
    settings: DemoSettings,
    fleet: Fleet,
    conversations: int,
    *,
    start: int,
    routing: RoutingConfig | None = None,
    table: PairRiskTable | None = None,
    think_s: float = THINK_S,
) -> ArmRun:
    """Run ``conversations`` conversations (indices ``start…``) in a fresh world; streaming off.

    Args:
        settings: seeds and concurrency (the traffic policy's ``stream_share`` is set to 0
            so every reply is read the same way in both runs).
        fleet: the planted world.
        conversations: how many.
        start: first conversation index.
        routing: the ``routing`` section (``None``: off, the router's own order).
        table: the pair-risk table to publish before the run (routing on only).
        think_s: pause before each later turn, so the previous reply is attributed (off
            the request path) before the next request, as with a human user.
    """
    verdicts = _Verdicts()
    world = build_world(settings, fleet=fleet, routing=routing, exporters=[verdicts], record_truth=True)
    try:
        if table is not None and world.runtime.routing is not None:
            world.runtime.routing.holder.table = table
        client = _RecordingClient(world.client)
        policy = dataclasses.replace(settings.policy, stream_share=0.0, think_s=think_s)
        driver = Driver(
            client,
            fleet,
            seed=settings.seed,
            policy=policy,
            concurrency=settings.concurrency,
            conversation_ids=True,
        )
        stats = asyncio.run(driver.run(conversations, start=start))
        world.monitor.flush()
        decisions: Counter[str] = Counter()
        if world.runtime.routing is not None:
            for (_, outcome), n in world.runtime.routing.counts.snapshot().items():
                decisions[outcome] += n
        truth = {(t.text, t.author, t.depth): t for t in world.provider.truth}
        return ArmRun(client.calls, verdicts.turns, truth, stats, dict(decisions))
    finally:
        close_world(world)


def _arm_arrays(
    run: ArmRun, fleet: Fleet, ids: Mapping[str, int], n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, ArmTotals]:
    """Per conversation: passes, checks and planted expected passes on fallback turns; totals."""
    dynamics = Dynamics(fleet)
    passes, checks, expected = np.zeros(n), np.zeros(n), np.zeros(n)
    fallback_turns = 0
    by_group = {m.group: m.name for m in fleet.models}
    for call in run.calls:
        if call.author == by_group.get(call.group):
            continue
        fallback_turns += 1
        i = ids[call.conversation]
        verdicts = run.verdicts.get((call.conversation, call.depth), {})
        truth = run.truth.get((call.text, call.author, call.depth))
        probs = (
            dynamics.probabilities(truth.author, truth.prefix, truth.depth, truth.previous)
            if truth is not None
            else {}
        )
        for rule, verdict in verdicts.items():
            if verdict not in ("pass", "fail"):
                continue
            checks[i] += 1
            passes[i] += verdict == "pass"
            expected[i] += probs.get(rule, np.nan)
    totals = ArmTotals(
        turns=len(run.calls),
        fallback_turns=fallback_turns,
        checks=int(checks.sum()),
        passes=int(passes.sum()),
        expected_passes=float(expected.sum()),
        fallback_attempts=sum(c.fallbacks for c in run.calls),
        failed_turns=run.stats.failed_turns,
        cost_usd=sum(c.cost_usd for c in run.calls),
    )
    return passes, checks, expected, totals


def compare_runs(
    router: ArmRun,
    risk: ArmRun,
    fleet: Fleet,
    conversation_ids: list[str],
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> RoutingComparison:
    """The paired comparison of two runs of the same conversations."""
    ids = {c: i for i, c in enumerate(conversation_ids)}
    n = len(conversation_ids)
    pa, na, ea, ta = _arm_arrays(router, fleet, ids, n)
    pb, nb, eb, tb = _arm_arrays(risk, fleet, ids, n)
    est, lo, hi = paired_difference(pa, na, pb, nb, resamples=resamples, confidence=confidence, seed=seed)
    predicted = eb.sum() / nb.sum() - ea.sum() / na.sum() if na.sum() and nb.sum() else float("nan")
    return RoutingComparison(
        conversations=n,
        router=ta,
        risk=tb,
        delta_pp=100 * est,
        ci_low_pp=100 * lo,
        ci_high_pp=100 * hi,
        predicted_pp=100 * float(predicted),
        confidence=confidence,
        resamples=resamples,
        decisions=risk.decisions,
    )


def compare_routing(
    settings: DemoSettings,
    fleet: Fleet,
    warmup: RefitResult,
    conversations: int,
    *,
    start: int | None = None,
    routing: RoutingConfig = COMPARE_ROUTING,
) -> RoutingComparison:
    """Publish ``warmup``'s table and run ``conversations`` fresh conversations in both orders.

    Args:
        settings: the demo's knobs (seed, concurrency).
        fleet: the planted world the warm-up ran on.
        warmup: the refit of the warm-up traffic.
        conversations: conversations per run.
        start: first conversation index (default: right after the warm-up's).
        routing: the risk-aware run's policy.
    """
    table = PairRiskTable.from_refit(warmup, rule=routing.rule)
    first = settings.conversations if start is None else start
    own = run_arm(settings, fleet, conversations, start=first)
    risk = run_arm(settings, fleet, conversations, start=first, routing=routing, table=table)
    ids = [f"sim-{settings.seed}-{i}" for i in range(first, first + conversations)]
    return compare_runs(own, risk, fleet, ids, seed=settings.seed)


def by_conversation(calls: list[Call]) -> dict[str, list[tuple[int, str, str, str]]]:
    """Calls grouped by conversation, in depth order: (depth, group, author, text)."""
    out: defaultdict[str, list[tuple[int, str, str, str]]] = defaultdict(list)
    for c in calls:
        out[c.conversation].append((c.depth, c.group, c.author, c.text))
    return {k: sorted(v) for k, v in out.items()}
