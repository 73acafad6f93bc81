"""The runtime's routing state: built only when enabled, fed by the periodic refit."""

from __future__ import annotations

from handoffmon import build_runtime
from handoffmon.config import config_from_mapping
from handoffmon.depth import DepthBuckets
from handoffmon.refit import refit
from handoffmon.sim import default_fleet
from handoffmon.sim.offline import simulate_counts


def test_refit_publishes_the_table_and_bad_rule_counts_a_refit_failure() -> None:
    """refit_now() fills the routing table; a routing.rule the refit lacks keeps no table and
    counts monitor_errors{stage="refit"} (the gauges were still published)."""
    counts = simulate_counts(default_fleet(), 100, seed=3)
    for rule, ok in (("all", True), ("no-such-rule", False)):
        config = config_from_mapping(
            {
                "telemetry": {"log_turns": False},
                "refit": {"interval_s": 3600},
                "routing": {"enabled": True, "rule": rule},
            }
        )
        with build_runtime(config, registry=None) as rt:
            rt.refit._snapshot = lambda: counts  # the runtime's own aggregates are empty here
            result = rt.refit_now()
            assert (result is not None) is ok
            assert (rt.routing.holder.table is not None) is ok
            if ok:
                assert rt.routing.holder.table.created_at == result.created_at  # type: ignore[union-attr]
            else:
                assert rt.monitor.stats["monitor_errors"].get("refit", 0) >= 1


def test_table_matches_a_direct_refit() -> None:
    counts = simulate_counts(default_fleet(), 100, seed=3)
    result = refit(counts, buckets=DepthBuckets(), now=5.0)
    from handoffmon.routing import TableHolder

    holder = TableHolder()
    assert holder.publish(result)
    assert holder.table is not None and len(holder.table) == 30


def test_a_refit_of_other_counts_is_refused_unless_published_as_foreign() -> None:
    """The runtime's own refits publish; a refit document of other counts (another deployment's,
    a Prometheus job's), its pairs named like this router's, is refused: the table stays, the
    failure is counted as a refit's. ``foreign=True`` is the way to route by it on purpose."""
    from dataclasses import replace

    counts = simulate_counts(default_fleet(), 100, seed=3)
    config = config_from_mapping(
        {"telemetry": {"log_turns": False}, "refit": {"interval_s": 3600}, "routing": {"enabled": True}}
    )
    with build_runtime(config, registry=None) as rt:
        rt.refit._snapshot = lambda: counts
        own = rt.refit_now()
        assert own is not None and rt.routing.holder.table is not None
        kept = rt.routing.holder.table
        elsewhere = simulate_counts(default_fleet(), 100, seed=4)
        other = replace(
            refit(elsewhere, buckets=DepthBuckets(), now=own.created_at + 1),
            source="prometheus://staging:9090",
        )
        errors = rt.monitor.stats["monitor_errors"].get("refit", 0)
        assert not rt.routing.holder.publish(other)
        assert rt.routing.holder.table is kept
        assert rt.monitor.stats["monitor_errors"].get("refit", 0) == errors + 1
        assert rt.routing.holder.publish(other, foreign=True)
        assert rt.routing.holder.table is not kept
        assert rt.routing.holder.table.created_at == other.created_at  # type: ignore[union-attr]
