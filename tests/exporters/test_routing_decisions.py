"""``handoffmon_routing_decisions_total{mode,outcome}``, the table age and timestamp, in a real registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from handoffmon.config import RoutingConfig
from handoffmon.exporters.routing_decisions import RoutingCollector
from handoffmon.routing import OUTCOMES, PairRiskTable, RoutingState


def test_every_mode_and_outcome_is_exposed_from_zero_and_counts() -> None:
    """All 2 × len(OUTCOMES) series exist at 0; a counted decision shows; no table, no age gauge."""
    state = RoutingState(RoutingConfig(enabled=True))
    registry = CollectorRegistry()
    registry.register(RoutingCollector(state.counts.snapshot, state.table_age_s, clock=lambda: 100.0))
    state.counts.count("enforce", "reordered")
    assert (
        registry.get_sample_value(
            "handoffmon_routing_decisions_total", {"mode": "enforce", "outcome": "reordered"}
        )
        == 1.0
    )
    text = generate_latest(registry).decode()
    assert text.count("handoffmon_routing_decisions_total{") == 2 * len(OUTCOMES)
    assert "handoffmon_routing_table_age_seconds" not in text
    assert "handoffmon_routing_table_timestamp_seconds" not in text
    state.holder.table = PairRiskTable({}, created_at=40.0)
    assert registry.get_sample_value("handoffmon_routing_table_age_seconds") == 60.0
    # the age at query time, time() - this, whether or not the process still writes its files
    assert registry.get_sample_value("handoffmon_routing_table_timestamp_seconds") == 40.0
