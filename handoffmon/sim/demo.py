"""The demo run: fleet → Router with fallbacks → handoffmon wrapper → traffic → refit → report.

Used by ``handoffmon demo`` and by the end-to-end tests (in-process, same code path).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from handoffmon.config import (
    AttributionConfig,
    HandoffmonConfig,
    PipelineConfig,
    RefitConfig,
    RoutingConfig,
    ShadowConfig,
    TelemetryConfig,
)
from handoffmon.counts import Counts
from handoffmon.refit.result import RefitResult
from handoffmon.routing.compare import RoutingComparison
from handoffmon.sim.driver import Driver, DriveStats, TrafficPolicy
from handoffmon.sim.fleet import Fleet, make_fleet
from handoffmon.sim.recovery import Recovery, recover
from handoffmon.sim.rules import rule_configs
from handoffmon.sim.shadow_truth import ShadowRecovery, ShadowTruth, recover_switch_costs
from handoffmon.sim.truth import Truth

BASE_CONVERSATIONS = 600
"""Conversations at ``size=1`` (≈ 4,600 turns on average): the smallest run whose π/σ recovery stays
above Pearson 0.9 across seeds with the default fleet."""


@dataclass(frozen=True)
class DemoSettings:
    """Knobs of a demo run.

    Attributes:
        size: scales the number of conversations (``BASE_CONVERSATIONS × size``).
        seed: seeds the fleet's jitter, the traffic and every reply.
        models: fleet size (6 = the hand-planted default fleet).
        rules: how many of the demo rules to check (1-5).
        concurrency: conversations in flight.
        check_budget_s: per-check time budget. Generous: the budget is wall time, and on a
            busy 2-core machine the worker thread can wait for the GIL longer than the
            default 50 ms while dozens of async conversations run.
        policy: traffic shape.
        shadow_rate: share of eligible turns continued by a second model in the background
            (``demo --shadow``; 0 = off).
    """

    size: float = 1.0
    seed: int = 7
    models: int = 6
    rules: int = 4
    concurrency: int = 32
    check_budget_s: float = 5.0
    policy: TrafficPolicy = field(default_factory=TrafficPolicy)
    shadow_rate: float = 0.0

    @property
    def conversations(self) -> int:
        """Conversations of the initial run."""
        return max(10, round(BASE_CONVERSATIONS * self.size))


@dataclass
class DemoWorld:
    """Everything a demo run builds (kept together so ``--serve`` can keep driving it)."""

    settings: DemoSettings
    fleet: Fleet
    truth: Truth
    config: HandoffmonConfig
    provider: Any
    router: Any
    runtime: Any
    client: Any
    driver: Driver
    shadow_truth: ShadowTruth | None = None

    @property
    def monitor(self) -> Any:
        """The runtime's monitor."""
        return self.runtime.monitor


@dataclass(frozen=True)
class DemoOutcome:
    """What the initial run produced."""

    stats: DriveStats
    counts: Counts
    result: RefitResult
    recovery: Recovery
    elapsed_s: float
    injected: dict[str, int]
    shadow: ShadowRecovery | None = None


def demo_config(
    fleet: Fleet,
    provider_name: str,
    settings: DemoSettings,
    *,
    metrics_port: int | None = None,
    refit_interval_s: float = 0.0,
    routing: RoutingConfig | None = None,
) -> HandoffmonConfig:
    """Embedded defaults (memory store) plus the demo's rules and canonical model names.

    Args:
        fleet: the simulated fleet (rules and canonical names come from it).
        provider_name: litellm custom provider the fleet is served through.
        settings: the run's knobs.
        metrics_port: serve /metrics there (``telemetry.metrics_port``), if given.
        refit_interval_s: the runtime's periodic refit (0 = only the demo's own refits).
        routing: the ``routing`` section (default: off).
    """
    from handoffmon.sim.router import canonical_models

    return HandoffmonConfig(
        rules=rule_configs(fleet),
        attribution=AttributionConfig(canonical_models=canonical_models(fleet, provider_name)),
        pipeline=PipelineConfig(check_budget_s=settings.check_budget_s),
        telemetry=TelemetryConfig(log_turns=False, metrics_port=metrics_port),
        refit=RefitConfig(interval_s=refit_interval_s),
        routing=routing if routing is not None else RoutingConfig(),
        shadow=demo_shadow(fleet, settings.shadow_rate, settings.seed),
    )


def demo_shadow(fleet: Fleet, rate: float, seed: int) -> ShadowConfig:
    """Shadow continuation at ``rate`` to every fleet model, with budgets no demo run reaches
    (the simulated models cost nothing); off at rate 0. The no-handoff arm asks the router's
    fallbacks of the served model's group. ``shadow.seed`` comes from the demo's ``seed``, so a
    rerun samples the same turns (a deployment's default is a random secret per process)."""
    if rate <= 0:
        return ShadowConfig()
    return ShadowConfig(
        enabled=True,
        sample_rate=rate,
        seed=f"handoffmon demo --seed {seed}",
        max_calls_per_conversation=10**9,
        targets=[m.name for m in fleet.models],
        calls_per_minute=1e9,
        tokens_per_hour=10**12,
        usd_per_day=None,
        pair_calls_per_hour=10**9,
        max_concurrency=2,
        queue_size=100_000,
        breaker_failures=10**6,
    )


def build_world(
    settings: DemoSettings,
    *,
    metrics_port: int | None = None,
    refit_interval_s: float = 0.0,
    on_turn: Callable[[], None] | None = None,
    fleet: Fleet | None = None,
    registry: Any = None,
    routing: RoutingConfig | None = None,
    exporters: Sequence[Any] = (),
    record_truth: bool = False,
) -> DemoWorld:
    """Build fleet, provider, Router, runtime and wrapper (litellm is imported here).

    The runtime is built by ``build_runtime`` like every other entry point's, with its
    series kept private (shown on ``metrics_port`` when given).

    Args:
        settings: the run's knobs.
        metrics_port: serve /metrics on this loopback port (``demo --serve``).
        refit_interval_s: seconds between the runtime's periodic refits (0 = none).
        on_turn: progress callback per reply.
        fleet: a hand-planted fleet (default: ``make_fleet(settings.models, settings.rules)``).
        registry: a Prometheus registry to show the runtime's series in (default: private).
        routing: the ``routing`` section (default: off).
        exporters: extra exporters for the runtime.
        record_truth: the provider keeps a ``TurnTruth`` per reply (``provider.truth``).

    Raises:
        ConfigError: ``metrics_port`` cannot be bound.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from handoffmon.integrations import wrap
    from handoffmon.runtime import build_runtime
    from handoffmon.sim.provider import SimProvider
    from handoffmon.sim.router import build_router, unregister_provider

    fleet = fleet or make_fleet(settings.models, settings.rules, seed=settings.seed)
    provider = SimProvider(fleet, seed=settings.seed, record=record_truth)
    router = build_router(fleet, provider)
    config = demo_config(
        fleet,
        provider.provider_name or "",
        settings,
        metrics_port=metrics_port,
        refit_interval_s=refit_interval_s,
        routing=routing,
    )
    try:
        runtime = build_runtime(config, registry=registry, exporters=exporters)
    except Exception:
        unregister_provider(provider.provider_name or "")
        raise
    client = wrap(router, runtime=runtime)
    driver = Driver(
        client,
        fleet,
        seed=settings.seed,
        policy=settings.policy,
        concurrency=settings.concurrency,
        on_turn=on_turn,
    )
    shadow_truth = None
    if runtime.shadow is not None:
        shadow_truth = ShadowTruth(provider)
        runtime.shadow.on_pair = shadow_truth.add
    return DemoWorld(
        settings, fleet, Truth.of(fleet), config, provider, router, runtime, client, driver, shadow_truth
    )


def refit_world(world: DemoWorld) -> tuple[Counts, RefitResult]:
    """Drain the pipeline and refit its aggregates."""
    from handoffmon.refit import refit

    world.runtime.flush()
    counts = world.runtime.snapshot()
    return counts, refit(counts, buckets=world.config.buckets, settings=world.config.refit, source="demo")


def run_initial(world: DemoWorld) -> DemoOutcome:
    """Drive the initial traffic, then refit and compare with the planted truth."""
    t0 = time.perf_counter()
    stats = asyncio.run(world.driver.run(world.settings.conversations))
    counts, result = refit_world(world)
    injected = {k: v for k, v in world.provider.stats.items() if not k.startswith("reply:")}
    shadow = None
    if world.shadow_truth is not None:
        shadow = recover_switch_costs(result, world.shadow_truth.planted())
    return DemoOutcome(
        stats=stats,
        counts=counts,
        result=result,
        recovery=recover(result, world.truth),
        elapsed_s=time.perf_counter() - t0,
        injected=injected,
        shadow=shadow,
    )


def run_facts(outcome: DemoOutcome) -> dict[str, str]:
    """Headline facts for the report header."""
    s, rec = outcome.stats, outcome.recovery
    handoffs = sum(n for k, n in outcome.counts.turns.items() if k.handoff == "true")
    facts = {
        "conversations": f"{s.conversations:,}",
        "turns": f"{s.turns:,}",
        "handoff turns": f"{handoffs:,}",
        "router fallbacks": f"{s.fallbacks:,}",
        "π recovery (Pearson)": f"{rec.pearson_pi:.3f}",
        "σ recovery (Pearson)": f"{rec.pearson_sigma:.3f}",
    }
    if outcome.shadow is not None:
        facts["switch-cost recovery (Pearson)"] = f"{outcome.shadow.pearson:.3f}"
        facts["switch-cost coverage"] = f"{outcome.shadow.coverage:.2f}"
    return facts


def write_outputs(
    outcome: DemoOutcome, world: DemoWorld, out_dir: Path, *, reordering: RoutingComparison | None = None
) -> dict[str, Path]:
    """Write the report, the refit JSON and the planted truth JSON (atomically) into ``out_dir``.

    ``reordering`` (``--compare-routing``) adds the report's "Adherence saved by reordering".
    """
    import json

    from handoffmon.report import render_report

    out_dir.mkdir(parents=True, exist_ok=True)
    truth = world.truth.to_dict()
    if world.shadow_truth is not None:
        truth["switch_costs"] = world.shadow_truth.to_list()
    files = {
        "report": (
            out_dir / "handoffmon-report.html",
            render_report(
                outcome.result,
                truth=truth,
                run=run_facts(outcome),
                title="handoffmon demo — simulated fleet, planted truth",
                reordering=reordering,
            ),
        ),
        "refit": (out_dir / "handoffmon-refit.json", outcome.result.to_json()),
        "truth": (out_dir / "handoffmon-truth.json", json.dumps(truth, indent=2)),
    }
    for path, text in files.values():
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    return {k: p for k, (p, _) in files.items()}


def close_world(world: DemoWorld) -> None:
    """Close the runtime (drains the monitor) and unregister the simulated provider from litellm."""
    from handoffmon.sim.router import unregister_provider

    world.runtime.close()
    unregister_provider(world.provider.provider_name or "")
