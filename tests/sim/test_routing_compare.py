"""``demo --compare-routing`` on the simulator: same traffic twice, router's order vs risk-aware."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytest.importorskip("litellm")

from handoffmon.config import RoutingConfig
from handoffmon.routing import PairRiskTable
from handoffmon.sim.demo import DemoSettings, build_world, close_world, run_initial
from handoffmon.sim.fleet import default_fleet
from handoffmon.sim.routing_compare import COMPARE_ROUTING, by_conversation, compare_routing, run_arm


@pytest.mark.slow
def test_missing_or_stale_table_runs_exactly_the_routers_traffic() -> None:
    """Routing off, routing on with no table, and with a table older than max_table_age_s: every
    conversation gets the same groups, authors and reply texts, turn for turn."""
    settings = DemoSettings(seed=5, concurrency=10)
    fleet = default_fleet(settings.rules, seed=settings.seed)
    stale = PairRiskTable({}, created_at=0.0)
    off = run_arm(settings, fleet, 10, start=0, think_s=0.01)
    none = run_arm(settings, fleet, 10, start=0, routing=COMPARE_ROUTING, think_s=0.01)
    old = run_arm(settings, fleet, 10, start=0, routing=COMPARE_ROUTING, table=stale, think_s=0.01)
    assert sum(c.fallbacks for c in off.calls) > 0  # failures were injected, fallbacks taken
    assert by_conversation(off.calls) == by_conversation(none.calls) == by_conversation(old.calls)
    assert none.decisions["no_table"] > 0 and old.decisions["stale"] > 0
    assert none.decisions["reordered"] == old.decisions["reordered"] == 0


@pytest.mark.slow
def test_risk_aware_order_saves_adherence_close_to_the_planted_prediction() -> None:
    """Warm-up refit on 300 conversations of the default fleet, then 300 fresh conversations in both
    orders. The planted prediction (each run's fallback turns scored by the planted pass
    probabilities) is positive, the measured gain's 95% paired interval excludes 0 and contains the
    prediction, and the two differ by at most 3 pp: the noise of the ~700 fallback-turn checks that
    differ between the runs is ~1 pp (Bernoulli SD), so 3 pp is three of them."""
    settings = DemoSettings(size=0.5, seed=7)
    world = build_world(settings)
    try:
        warm = run_initial(world)
    finally:
        close_world(world)
    cmp = compare_routing(settings, world.fleet, warm.result, 300)
    assert cmp.decisions["reordered"] > 100 and cmp.decisions["error"] == 0
    assert cmp.predicted_pp > 1.0
    assert 0 < cmp.ci_low_pp <= cmp.predicted_pp <= cmp.ci_high_pp
    assert abs(cmp.delta_pp - cmp.predicted_pp) <= 3.0
    assert cmp.risk.failed_turns == cmp.router.failed_turns


def test_routing_off_in_the_demo_config_by_default() -> None:
    world = build_world(DemoSettings(size=0.02))
    try:
        assert world.config.routing == RoutingConfig() and world.runtime.routing is None
    finally:
        close_world(world)
