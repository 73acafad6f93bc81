"""End to end on the simulator: production through Router + wrapper + monitor vs an eval of the same fleet."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from handoffmon.sim.fleet import Fleet, make_fleet

FAST_RULE = "no_commas"


def _quiet_fleet(fast_scale: float | None = None) -> Fleet:
    """Three models with no handoff effects, failures or fallbacks; optionally one rule decays faster."""
    base = make_fleet(3, 4, seed=7)
    models = tuple(
        dataclasses.replace(m, influence=0.0, susceptibility=0.0, rate_limit_rate=0.0, timeout_rate=0.0)
        for m in base.models
    )
    rules = tuple(
        dataclasses.replace(r, tf_scale=fast_scale) if fast_scale and r.name == FAST_RULE else r
        for r in base.rules
    )
    return dataclasses.replace(base, models=models, rules=rules, mu=0.0, fallbacks={})


def _production_counts(fleet: Fleet, conversations: int) -> object:
    from handoffmon.config import HandoffmonConfig, PipelineConfig, RefitConfig, TelemetryConfig
    from handoffmon.integrations import wrap
    from handoffmon.pipeline.monitor import Monitor
    from handoffmon.sim.driver import Driver, TrafficPolicy
    from handoffmon.sim.provider import SimProvider
    from handoffmon.sim.router import build_router, unregister_provider
    from handoffmon.sim.rules import rule_configs

    provider = SimProvider(fleet, seed=3)
    router = build_router(fleet, provider)
    config = HandoffmonConfig(
        rules=rule_configs(fleet),
        pipeline=PipelineConfig(check_budget_s=5.0),
        telemetry=TelemetryConfig(log_turns=False, prometheus=False),
        refit=RefitConfig(interval_s=0),
    )
    monitor = Monitor(config)
    try:
        driver = Driver(
            wrap(router, monitor=monitor),
            fleet,
            seed=3,
            policy=TrafficPolicy(switch_rate=0.0, stream_share=0.0, max_turns=24),
            concurrency=16,
        )
        asyncio.run(driver.run(conversations))
        monitor.flush()
        return monitor.snapshot()
    finally:
        monitor.close()
        unregister_provider(provider.provider_name or "")


@pytest.mark.slow
def test_simulated_production_with_a_faster_decaying_rule_is_flagged_against_the_eval(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Production fleet plants p_TF × 4 on no_commas; the eval runs the unchanged fleet.

    compare flags no_commas at depth and no other rule (production and eval otherwise
    share every planted chain; no handoff effects, failures or routing changes).
    """
    from handoffmon.evals.compare import compare
    from handoffmon.evals.models import sim_target
    from handoffmon.evals.results import build_result
    from handoffmon.evals.runner import Runner, RunSettings
    from handoffmon.evals.script import script_from_dict
    from handoffmon.evals.shapes import shapes_from_counts
    from handoffmon.evals.store import ResultStore

    shapes = shapes_from_counts(_production_counts(_quiet_fleet(fast_scale=5.0), 500), source="sim")  # type: ignore[arg-type]
    eval_fleet = _quiet_fleet()
    target = sim_target(eval_fleet, seed=5, fallbacks=False, failures=False)
    rules = [
        {"name": "reply_in_spanish", "check": "language", "params": {"languages": ["es"]}},
        {"name": "no_commas", "check": "no_commas"},
        {"name": "answer_tag", "check": "answer_tag"},
        {"name": "max_60_words", "check": "length", "params": {"unit": "words", "max": 60}},
    ]
    script = script_from_dict(
        {
            "id": "sim",
            "runs": 60,
            "rules": rules,
            "turns": [{"user": f"q{d}", "checkpoint": d in (1, 4, 8, 16)} for d in range(1, 17)],
        }
    )
    with ResultStore(tmp_path / "e.sqlite") as store:
        runner = Runner(target.responder, store, RunSettings(concurrency=16))
        for m in eval_fleet.models:
            asyncio.run(runner.run([script], m.group))
        result = build_result(list(store.rows()), [script], "e.sqlite")
    c = compare(shapes, [result])
    flagged = {(r.rule, r.depth_bucket) for r in c.flagged}
    assert {r for r, _ in flagged} == {FAST_RULE}, c.rules
    assert (FAST_RULE, "13-16") in flagged
