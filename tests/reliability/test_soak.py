"""Soak: simulated traffic through the wrapper and through ``handoffmon serve`` for ``HANDOFFMON_SOAK_S``.

Each soak asserts, after a warm-up (half the run, at most 5 minutes: handoffmon's bounded
caches, litellm's and the allocator's arenas fill during the first few thousand turns):
- resident memory of the soaked process is flat: median of the last three samples minus
  the median of the first three post-warm-up samples ≤ ``RSS_TOLERANCE`` (8 MiB). Its
  power grows with the run: in the 60 s CI run (~2-5k turns after warm-up on a loaded
  2-core machine) it catches leaks of a few KB per turn, i.e. a leaked turn record; in the
  30-minute run (~100k+ turns after warm-up) leaks under 100 bytes per turn;
- the store is bounded: the memory store stays at its LRU cap; the Redis store (keys
  expire ``REDIS_TTL_S`` after their last write) never holds more than
  ``KEYS_PER_TURN`` keys per turn sent within the last TTL (+ 2 s of sampling slack) — a
  store that kept keys would hold 2 per turn of the whole run;
- zero lost turns: turns counted by the monitor + turns counted as dropped == turns the
  traffic generator completed (and drops are reported).
Reports (with every sample) go to ``bench-results/soak-*.json``.
"""

from __future__ import annotations

import asyncio
import os
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.helpers import (
    MIB,
    Sampler,
    growth,
    recent_turns,
    soak_seconds,
    warmup_s,
    write_report,
)
from tests.reliability.proxy_traffic import ServeProcess, Traffic, serve_config, upstream_thread
from tests.stores.redis_server import RedisServer

# 60 s each by default (HANDOFFMON_SOAK_S); CI runs them in the serial half of its slow step
pytestmark = [pytest.mark.slow, pytest.mark.exclusive]

RSS_TOLERANCE = 8 * MIB
"""Allowed post-warm-up growth of resident memory (see the module docstring)."""
KEYS_PER_TURN = 3
"""Redis keys written per turn at most: the reply's chain key, its content key, the conversation state."""
MAX_CONVERSATIONS = 50
"""The wrapper soak's memory-store LRU cap, small so the steady state is reached in warm-up."""
REDIS_TTL_S = 10
"""The proxy soak's Redis TTL: keys expire, so the key count levels off after one TTL."""
STREAM_SHARE = 0.2
"""Share of the wrapper soak's calls that stream. Before Python 3.12, litellm's
``CustomStreamWrapper.__del__`` sets ContextVars from inside cyclic GC, which can trip CPython
gh-148891 (a use-after-free in ``ContextVar.set``, fixed by 3.12's GC) and segfault the process
— with or without handoffmon (docs/operations/known-issues.md). The simulator's driver collects
garbage only at its own safe points there (``handoffmon.sim.driver.SAFE_POINT_GC``), so the soak
streams on every version."""


def _wrapper_world(seed: int) -> tuple[Any, Any, Any, Any]:
    """Simulated fleet → real litellm Router → wrap(); returns (monitor, client, fleet, provider)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from handoffmon.config import config_from_mapping
    from handoffmon.exporters import build_exporters
    from handoffmon.integrations.router import RouterWrapper
    from handoffmon.pipeline.monitor import Monitor
    from handoffmon.sim.fleet import default_fleet
    from handoffmon.sim.provider import SimProvider
    from handoffmon.sim.router import build_router, canonical_models
    from handoffmon.sim.rules import rule_configs

    fleet = default_fleet()
    provider = SimProvider(
        fleet, seed=seed, max_tracked=2_000
    )  # > histories in flight; the default (500k) would grow for hours
    router = build_router(fleet, provider)
    config = config_from_mapping(
        {
            "rules": [r.model_dump() for r in rule_configs(fleet)],
            "store": {"max_conversations": MAX_CONVERSATIONS},
            # small process caches, so their steady state is reached during warm-up and
            # post-warm-up growth measures leaks, not caches filling to their bounds
            "attribution": {
                "canonical_models": canonical_models(fleet, provider.provider_name or ""),
                "text_cache_bytes": 1_000_000,
                "pending_max": 2_000,
            },
            # a small queue too: when traffic outpaces the checks on a loaded 2-core machine the
            # backlog grows to the queue's bound (10k turns ~ 15 MiB by default) and then drops
            # are counted; that fill is not a leak, so reach it within the warm-up
            "pipeline": {"check_budget_s": 0.5, "queue_size": 1_000},
            "telemetry": {"log_turns": False},
            "refit": {"interval_s": 0},
        }
    )
    monitor = Monitor(config, exporters=build_exporters(config))
    return monitor, RouterWrapper(router, monitor), fleet, provider


async def _drive_until(driver: Any, deadline: float, batch: int = 100) -> None:
    """Run conversations in batches until ``deadline`` (monotonic); running ones finish."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.call_later(max(0.0, deadline - time.monotonic()), stop.set)
    start = 0
    while not stop.is_set():
        await driver.run(batch, start=start, stop=stop)
        start += batch


@pytest.mark.timeout(7200)
async def test_wrapper_soak_memory_flat_store_bounded_no_lost_turns() -> None:
    """Simulated traffic through wrap(litellm.Router): RSS and store flat after warm-up; all turns counted."""
    from handoffmon.sim.driver import Driver, TrafficPolicy

    duration = soak_seconds()
    monitor, client, fleet, _provider = _wrapper_world(seed=11)
    driver = Driver(client, fleet, seed=11, concurrency=16, policy=TrafficPolicy(stream_share=STREAM_SHARE))
    store = monitor.store.inner  # the memory backend behind the store guard
    with Sampler(os.getpid(), lambda: len(store), lambda: driver.stats.turns) as sampler:
        await _drive_until(driver, time.monotonic() + duration)
    keys_end = store.key_count
    monitor.close(60)
    snap = monitor.snapshot()
    warmup = warmup_s(duration)
    rss, conv = growth(sampler.samples, warmup, "rss_bytes"), growth(sampler.samples, warmup, "store_size")
    sent = driver.stats.turns
    write_report(
        "wrapper",
        {
            "duration_s": duration,
            "turns_sent": sent,
            "turns_per_s": sent / driver.stats.elapsed_s,
            "streamed": driver.stats.streamed,
            "turns_counted": snap.total_turns,
            "dropped": snap.dropped,
            "monitor_errors": dict(snap.monitor_errors),
            "router_failed_turns": driver.stats.failed_turns,
            "rss_mib_start": rss.start / MIB,
            "rss_mib_end": rss.end / MIB,
            "rss_growth_mib": rss.delta / MIB,
            "rss_slope_mib_per_h": rss.slope_per_h / MIB,
            "store_conversations": [conv.start, conv.end, conv.peak],
            "store_keys_end": keys_end,
        },
        sampler.samples,
    )
    assert sent > 0
    assert snap.total_turns + snap.dropped == sent, (
        "a turn the application got back was neither counted nor dropped"
    )
    assert set(snap.monitor_errors) <= {"check"}  # over-budget checks on a loaded machine are verdicts
    assert conv.start == conv.end == conv.peak == MAX_CONVERSATIONS, "memory store not at its LRU cap"
    assert rss.delta <= RSS_TOLERANCE, f"RSS grew {rss.delta / MIB:.1f} MiB after warm-up"


# -- through the proxy --------------------------------------------------------------------


async def _run_for(traffic: Traffic, seconds: float, on_tick: Any = None) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(seconds, stop.set)
    task = asyncio.create_task(traffic.run(stop))
    while not task.done():
        await asyncio.sleep(1.0)
        if on_tick is not None:
            on_tick()
    await task


@pytest.mark.integration
@pytest.mark.timeout(7200)
async def test_proxy_soak_memory_flat_store_bounded_no_lost_turns(tmp_path: Path) -> None:
    """Traffic through a ``handoffmon serve`` process on a private Redis: RSS and key count flat; no loss."""
    import redis

    duration = soak_seconds()
    with ExitStack() as stack:
        server = stack.enter_context(RedisServer())
        url, mock = stack.enter_context(upstream_thread())
        store = {"backend": "redis", "url": server.url, "ttl_s": REDIS_TTL_S, "timeout_s": 0.5}
        serve = ServeProcess(serve_config(store), url, tmp_path)
        stack.callback(serve.stop)
        serve.wait_ready()
        client = redis.Redis.from_url(server.url)
        stack.callback(client.close)
        traffic = Traffic(f"{serve.url}/v1/chat/completions", seed=5)
        with Sampler(serve.proc.pid, client.dbsize, lambda: traffic.ok, interval_s=1.0) as sampler:
            await _run_for(traffic, duration, on_tick=mock.seen.clear)  # the mock's log would grow
        counters = serve.counters()
        status = serve.stop()
        warmup = max(warmup_s(duration), 2 * REDIS_TTL_S)
        rss, keys = (
            growth(sampler.samples, warmup, "rss_bytes"),
            growth(sampler.samples, warmup, "store_size"),
        )
        turns = counters.get("handoffmon_turns_total", 0.0)
        dropped = counters.get("handoffmon_queue_dropped_total", 0.0)
        write_report(
            "proxy",
            {
                "duration_s": duration,
                "turns_sent": traffic.ok,
                "turns_per_s": traffic.ok / duration,
                "failed_requests": traffic.failed,
                "turns_counted": turns,
                "dropped": dropped,
                "rss_mib_start": rss.start / MIB,
                "rss_mib_end": rss.end / MIB,
                "rss_growth_mib": rss.delta / MIB,
                "rss_slope_mib_per_h": rss.slope_per_h / MIB,
                "redis_keys": [keys.start, keys.end, keys.peak],
                "exit_status": status,
            },
            sampler.samples,
        )
    assert traffic.ok > 0 and traffic.failed == 0
    assert turns + dropped == traffic.ok, "an answered request was neither counted nor dropped"
    assert keys.peak > 0
    for s, recent in recent_turns(sampler.samples, REDIS_TTL_S + 2.0):
        assert s.store_size <= KEYS_PER_TURN * recent, (
            f"{s.store_size} keys at {s.t_s:.0f}s, {recent} recent turns"
        )
    assert rss.delta <= RSS_TOLERANCE, f"serve RSS grew {rss.delta / MIB:.1f} MiB after warm-up"
