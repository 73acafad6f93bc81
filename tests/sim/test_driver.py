"""Traffic driver: length distribution, routing changes, reproducibility, stopping."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest

from handoffmon.sim.driver import Driver, TrafficPolicy
from handoffmon.sim.fleet import default_fleet
from handoffmon.sim.provider import SimProvider
from handoffmon.sim.router import build_router, unregister_provider
from handoffmon.sim.scripts import CHALLENGES, DERAILS, ScriptLibrary


def test_length_distribution_mixes_short_chats_and_long_sessions() -> None:
    """Geometric + lognormal mix: many 1-3 turn chats, a long tail, capped at max_turns."""
    policy = TrafficPolicy()
    rng = np.random.default_rng(0)
    lengths = np.array([policy.length(rng) for _ in range(20_000)])
    assert lengths.min() == 1 and lengths.max() == policy.max_turns
    # P(length ≤ 2) from the two components: geometric(1/mean) and round(lognormal) < 2.5
    p_geom = 1 - (1 - 1 / policy.short_mean) ** 2
    p_logn = NormalDist().cdf((math.log(2.5) - math.log(policy.long_median)) / policy.long_sigma)
    expected = policy.short_share * p_geom + (1 - policy.short_share) * p_logn
    assert abs(np.mean(lengths <= 2) - expected) < 4 * math.sqrt(expected * (1 - expected) / len(lengths))
    assert 0.10 < np.mean(lengths >= 15) < 0.25  # the long tail
    assert 6.0 < lengths.mean() < 9.0
    assert abs(policy.mean_length() - lengths.mean()) < 0.3


def test_user_messages_include_derails_and_challenges_after_the_first_turn() -> None:
    """Turn 1 is always a question; later turns derail or challenge at roughly the configured rates."""
    lib = ScriptLibrary(derail_rate=0.2, challenge_rate=0.3)
    rng = np.random.default_rng(1)
    assert all(lib.user_message(1, rng) not in DERAILS + CHALLENGES for _ in range(200))
    later = [lib.user_message(5, rng) for _ in range(5000)]
    assert abs(np.mean([m in DERAILS for m in later]) - 0.2) < 0.03
    assert abs(np.mean([m in CHALLENGES for m in later]) - 0.3) < 0.03


@pytest.fixture
def quiet_fleet() -> Iterator:
    base = default_fleet()
    models = tuple(dataclasses.replace(m, rate_limit_rate=0.0, timeout_rate=0.0) for m in base.models)
    yield dataclasses.replace(base, models=models)


def _run(fleet, seed: int, conversations: int = 8, concurrency: int = 4):
    provider = SimProvider(fleet, seed=seed, record=True)
    router = build_router(fleet, provider)
    try:
        driver = Driver(router, fleet, seed=seed, concurrency=concurrency)
        stats = asyncio.run(driver.run(conversations))
    finally:
        unregister_provider(provider.provider_name or "")
    return stats, provider


def test_same_seed_reproduces_every_reply_whatever_the_concurrency(quiet_fleet) -> None:
    """Same seed → the same set of (author, prefix, depth, text), with 4 or 2 conversations in flight."""
    s1, p1 = _run(quiet_fleet, seed=5, concurrency=4)
    s2, p2 = _run(quiet_fleet, seed=5, concurrency=2)
    key = sorted((t.author, t.prefix or "", t.depth, t.text) for t in p1.truth)
    assert key == sorted((t.author, t.prefix or "", t.depth, t.text) for t in p2.truth)
    assert s1.turns == s2.turns == len(p1.truth) and s1.conversations == 8
    _, p3 = _run(quiet_fleet, seed=6)
    assert {t.text for t in p3.truth} != {t.text for t in p1.truth}


def test_routing_changes_create_handoffs_the_driver_counts(quiet_fleet) -> None:
    """With every turn re-routed, each later turn is served by another model than its prefix."""
    stats, provider = _run(dataclasses.replace(quiet_fleet), seed=3)
    assert stats.route_changes > 0 and stats.fallbacks == 0
    handoffs = [t for t in provider.truth if t.prefix is not None and t.prefix != t.author]
    assert len(handoffs) >= stats.route_changes * 0.99  # a route change always moves to another group
    assert sum(stats.authors.values()) == stats.turns


async def test_stop_event_ends_traffic_early(quiet_fleet) -> None:
    """A set stop event: no conversation runs to its drawn length."""
    provider = SimProvider(quiet_fleet, seed=2)
    router = build_router(quiet_fleet, provider)
    try:
        stop = asyncio.Event()
        stop.set()
        stats = await Driver(router, quiet_fleet, seed=2).run(50, stop=stop)
        assert stats.turns == 0 and stats.conversations == 0
    finally:
        unregister_provider(provider.provider_name or "")


def test_streaming_traffic_collects_garbage_only_at_safe_points_before_python_3_12(quiet_fleet) -> None:
    """CPython < 3.12 can run the cyclic collector inside ``ContextVar.set``, where LiteLLM's
    stream finalizer crashes the process (known issue): while the driver streams through
    LiteLLM, automatic collection is off and the thresholds' collections run between turns
    instead, so garbage is still collected. Afterwards collection is automatic again."""
    seen: list[tuple[bool, tuple[int, int, int]]] = []
    provider = SimProvider(quiet_fleet, seed=4)
    router = build_router(quiet_fleet, provider)
    policy = TrafficPolicy(stream_share=1.0)
    try:
        driver = Driver(router, quiet_fleet, seed=4, concurrency=4, policy=policy)
        driver.on_turn = lambda: seen.append((gc.isenabled(), gc.get_count()))
        before = gc.get_stats()[0]["collections"]
        stats = asyncio.run(driver.run(8))
    finally:
        unregister_provider(provider.provider_name or "")
    assert stats.turns == stats.streamed == len(seen) > 20
    assert gc.isenabled()
    if sys.version_info < (3, 12):
        assert not any(enabled for enabled, _ in seen)
        assert gc.get_stats()[0]["collections"] > before  # collected, at the safe points
        threshold = gc.get_threshold()[0]
        assert all(count[0] <= threshold for _, count in seen)  # never left past its threshold
    else:
        assert all(enabled for enabled, _ in seen)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="CPython gh-148891 is fixed by 3.12's collector")
@pytest.mark.slow
def test_safe_point_collection_survives_the_interpreter_bug_it_works_around() -> None:
    """The 20-line reproduction of the bug (a finalizer setting a ContextVar, collected from
    inside ``ContextVar.set``) crashes this interpreter within a second; run as the driver runs
    LiteLLM (automatic collection off, ``collect_at_safe_point`` between iterations) it survives."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONMALLOC": "debug", "PYTHONPATH": str(root)}
    cmd = [sys.executable, "-X", "faulthandler", "-m", "tests.reliability.hamt_repro", "50000"]
    crashed = subprocess.run(cmd, env=env, capture_output=True, timeout=120, cwd=root)
    assert crashed.returncode != 0 and b"survived" not in crashed.stdout
    safe = subprocess.run([*cmd, "--safe-points"], env=env, capture_output=True, timeout=120, cwd=root)
    assert safe.returncode == 0, safe.stderr.decode()[-2000:]
    assert b"survived 50000 iterations" in safe.stdout
