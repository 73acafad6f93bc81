"""The production → eval loop on the simulator, as a user runs it (shared by the loop tests)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner, Result

from handoffmon.cli import main
from handoffmon.sim.fleet import Fleet, make_fleet

FAST_RULE = "no_commas"
"""The rule production's fleet decays much faster than the eval's (planted)."""
EVAL_RULES = [
    {"name": "reply_in_spanish", "check": "language", "params": {"languages": ["es"]}},
    {"name": "no_commas", "check": "no_commas"},
    {"name": "answer_tag", "check": "answer_tag"},
    {"name": "max_60_words", "check": "length", "params": {"unit": "words", "max": 60}},
]


def production_fleet(fast_scale: float = 8.0) -> Fleet:
    """``make_fleet(3)`` (what ``--router sim:3`` serves) with FAST_RULE's p_TF multiplied."""
    base = make_fleet(3)
    rules = tuple(
        dataclasses.replace(r, tf_scale=r.tf_scale * fast_scale) if r.name == FAST_RULE else r
        for r in base.rules
    )
    return dataclasses.replace(base, rules=rules)


def run_production(fleet: Fleet, workdir: Path, conversations: int) -> Path:
    """Simulated traffic through a real Router wrapped by ``handoffmon.wrap``; aggregates in handoffmon.db."""
    import handoffmon
    from handoffmon.config import (
        AttributionConfig,
        HandoffmonConfig,
        PipelineConfig,
        RefitConfig,
        StoreConfig,
        TelemetryConfig,
    )
    from handoffmon.sim.driver import Driver, TrafficPolicy
    from handoffmon.sim.provider import SimProvider
    from handoffmon.sim.router import build_router, canonical_models, unregister_provider
    from handoffmon.sim.rules import rule_configs

    provider = SimProvider(fleet, seed=3)
    router = build_router(fleet, provider)
    db = workdir / "handoffmon.db"
    config = HandoffmonConfig(
        store=StoreConfig(backend="sqlite", path=str(db)),
        rules=rule_configs(fleet),
        attribution=AttributionConfig(canonical_models=canonical_models(fleet, provider.provider_name or "")),
        pipeline=PipelineConfig(check_budget_s=5.0),
        telemetry=TelemetryConfig(log_turns=False, prometheus=False),
        refit=RefitConfig(interval_s=0),
    )
    wrapped = handoffmon.wrap(router, config)
    try:
        policy = TrafficPolicy(switch_rate=0.0, stream_share=0.0, max_turns=24)
        asyncio.run(Driver(wrapped, fleet, seed=3, policy=policy, concurrency=16).run(conversations))
    finally:
        wrapped.monitor.close()
        unregister_provider(provider.provider_name or "")
    return db


def write_script(path: Path, *, turns: int, checkpoints: tuple[int, ...], runs: int, script_id: str) -> Path:
    """A drift script over the simulator's rules."""
    doc = {
        "id": script_id,
        "runs": runs,
        "rules": EVAL_RULES,
        "turns": [{"user": f"question {d}", "checkpoint": d in checkpoints} for d in range(1, turns + 1)],
    }
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def cli(*args: str) -> Result:
    """``handoffmon ARGS`` in-process (stdout and stderr kept apart)."""
    return CliRunner().invoke(main, list(args))


def run_loop(workdir: Path, *, conversations: int, runs: int, matrix_runs: int) -> dict[str, Any]:
    """production → shapes export → eval run → eval switch-matrix → eval compare; every artefact's path."""
    run_production(production_fleet(), workdir, conversations)
    out: dict[str, Any] = {"db": workdir / "handoffmon.db"}
    res = cli("shapes", "export", "--out", str(workdir / "shapes.json"))  # default source: ./handoffmon.db
    assert res.exit_code == 0, res.output
    drift = write_script(
        workdir / "drift.yaml", turns=12, checkpoints=(1, 2, 4, 9, 12), runs=runs, script_id="drift"
    )
    res = cli(
        "eval", "run", str(drift), "--router", "sim:3", "--model", "group-00",
        "--db", str(workdir / "eval.sqlite"), "--out", str(workdir / "eval.json"),
        "--html", str(workdir / "eval.html"), "--shapes", str(workdir / "shapes.json"),
        "--no-progress", "--concurrency", "16",
    )  # fmt: skip
    out["eval_run"] = res
    short = write_script(
        workdir / "short.yaml", turns=3, checkpoints=(3,), runs=matrix_runs, script_id="short"
    )
    res = cli(
        "eval", "switch-matrix", str(short), "--router", "sim:3", "--models", "group-00,group-01",
        "--cache", str(workdir / "cache"), "--out", str(workdir / "matrix.json"), "--html",
        str(workdir / "matrix.html"), "--resamples", "400", "--no-progress", "--score", "mean",
    )  # fmt: skip
    out["matrix"] = res
    res = cli(
        "eval", "compare", "--shapes", str(workdir / "shapes.json"), str(workdir / "eval.json"),
        str(workdir / "matrix.json"), "--model", "sim-00", "--out", "-",
        "--html", str(workdir / "compare.html"),
    )  # fmt: skip
    out["compare"] = res
    out["comparison"] = json.loads(res.stdout) if res.stdout.strip().startswith("{") else None
    return out
