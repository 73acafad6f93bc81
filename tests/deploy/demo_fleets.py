"""Two-model demo fleets for the alerting tests, and the recorder of their /metrics snapshots.

* ``one_problem_fleet``: ONE planted problem, the handoff ``atlas → birch``
  (Δ = μ + π_atlas + σ_birch = −0.16); the reverse pair is healthy (Δ = +0.04).
* ``healthy_fleet``: the same models and rules, nothing planted (Δ = 0 both ways).

The application reroutes a conversation to the other model on ``SWITCH_RATE`` = 10% of its
later turns (the demo's default is 30%). Δ compares a handoff turn with the suffix model's
*clean* turns at the same depth (no other model's text in the history), and at 30% a
conversation stays clean to depth d with probability 0.7^(d−1): beyond depth 8 the clean
baseline is a handful of checks (5 of birch's at depths 9-12 in 500 conversations, against 92
handoff checks there), so each rule's Δ interval is too wide to page (upper end −0.04 to +0.03
for the planted −0.16; HandoffPairRisky needs < −0.05) and only the pooled fit (``rule="all"``)
can. At 10% (0.9^(d−1)) every rule's Δ(atlas → birch) has its upper end at −0.07 to −0.11 and
pages on its own, as the pooled one does; the reverse pair and the healthy fleet stay clear of
−0.05 (their lowest upper ends: +0.03 and +0.01).

``python -m tests.deploy.demo_fleets`` runs each through the real demo pipeline
(simulated fleet → real ``litellm.Router`` → handoffmon wrapper → checkers → refit →
``PrometheusExporter``) and writes the exposition text to ``tests/deploy/data/``; the
default tests replay those snapshots (``tests/deploy/replay.py``), and the slow test in
``test_e2e_alertmanager.py`` re-runs the live traffic to show the snapshot's outcome is what
real demo traffic gives. The recording is seeded (``SEED`` draws every conversation, reply and
injected failure), so a rerun gives the same counts and refit; ``test_snapshots.py`` fails when
the snapshots no longer match what the code records.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from handoffmon.sim.fleet import DEFAULT_RULES, Fleet, SimModel

DATA = Path(__file__).resolve().parent / "data"
SNAPSHOTS = {"one-problem": DATA / "demo-one-problem.prom", "healthy": DATA / "demo-healthy.prom"}
RISKY_PAIR = ("atlas", "birch")
RULES = DEFAULT_RULES[:4]
CONVERSATIONS = 500
SEED = 11
SWITCH_RATE = 0.1
"""Per-turn probability that the application routes a conversation to the other model."""


def _model(name: str, group: str, influence: float, susceptibility: float) -> SimModel:
    return SimModel(
        name=name,
        group=group,
        base={r.name: 0.92 for r in RULES},
        p_tf=0.05,
        p_ft=0.45,
        influence=influence,
        susceptibility=susceptibility,
        rate_limit_rate=0.02,
        timeout_rate=0.01,
        flip_rate=0.1,
    )


def one_problem_fleet() -> Fleet:
    """atlas → birch hurts adherence by 16 points; birch → atlas is healthy (+4)."""
    return Fleet(
        models=(_model("atlas", "general", -0.06, 0.04), _model("birch", "backup", 0.06, -0.04)),
        rules=RULES,
        mu=-0.06,
        fallbacks={"general": ("backup",), "backup": ("general",)},
    )


def healthy_fleet() -> Fleet:
    """The same two models with no planted handoff effect."""
    fleet = one_problem_fleet()
    models = tuple(replace(m, influence=0.0, susceptibility=0.0) for m in fleet.models)
    return replace(fleet, models=models, mu=0.0)


FLEETS: dict[str, Callable[[], Fleet]] = {"one-problem": one_problem_fleet, "healthy": healthy_fleet}


@contextmanager
def demo_world(
    fleet: Fleet, registry: Any, *, seed: int = SEED, refit_interval_s: float = 0.0, think_s: float = 0.0
) -> Iterator[Any]:
    """The demo pipeline over ``fleet``, its runtime's series shown in ``registry`` (and, with
    ``refit_interval_s``, its periodic refit publishing the gauges there). ``think_s``: pause
    before each later turn of a conversation (live traffic at a pace the pipeline keeps up with)."""
    from handoffmon.sim.demo import DemoSettings, build_world, close_world
    from handoffmon.sim.driver import TrafficPolicy

    settings = DemoSettings(
        models=len(fleet.models),
        rules=len(fleet.rules),
        seed=seed,
        concurrency=16,
        policy=TrafficPolicy(switch_rate=SWITCH_RATE, think_s=think_s),
    )
    world = build_world(settings, fleet=fleet, registry=registry, refit_interval_s=refit_interval_s)
    try:
        yield world
    finally:
        close_world(world)


def record(name: str, conversations: int = CONVERSATIONS) -> str:
    """Drive ``conversations`` through the named fleet, refit, publish; the exposition text."""
    import asyncio

    from prometheus_client import CollectorRegistry, generate_latest

    from handoffmon.exporters import refit_publisher
    from handoffmon.sim.demo import refit_world

    registry = CollectorRegistry()
    with demo_world(FLEETS[name](), registry) as world:
        asyncio.run(world.driver.run(conversations))
        _, result = refit_world(world)
        assert refit_publisher(world.runtime.exporters)(result)
        return generate_latest(registry).decode()


def main() -> int:
    """Rewrite both snapshots."""
    DATA.mkdir(exist_ok=True)
    for name, path in SNAPSHOTS.items():
        path.write_text(record(name), encoding="utf-8")
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
