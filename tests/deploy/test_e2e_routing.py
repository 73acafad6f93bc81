"""The routing panels and RoutingTableStale on a real Prometheus scraping a runtime with routing on.

The recorded demo traffic of ``test_e2e_prometheus`` runs without routing, so its series
are absent there; here a runtime with ``routing.enabled`` serves its ``/metrics``
(``telemetry.metrics_port``), counts decisions and holds a two-hour-old table.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from handoffmon import build_runtime
from handoffmon.config import config_from_mapping
from handoffmon.routing import PairRisk, PairRiskTable
from tests.conftest import free_port
from tests.deploy.shipped import RULES, TEMPLATE_VALUES, alert_rules, dashboard, panel_targets, substitute
from tests.promserver import prometheus_server

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

VALUES = {**TEMPLATE_VALUES, "__rate_interval": "10s"}


def _routing_targets() -> dict[str, str]:
    out = {t: e for t, e in panel_targets(dashboard()) if "handoffmon_routing_" in e}
    assert len(out) == 2, out
    return out


def test_routing_panels_and_the_stale_table_alert_on_real_series(tmp_path: Path) -> None:
    """Decisions by (mode, outcome) and the table age reach the panels for job=prod only; a two-hour-old
    table makes RoutingTableStale's expression select prod (pending: it needs 10 minutes)."""
    port = free_port()
    config = config_from_mapping(
        {
            "telemetry": {"log_turns": False, "metrics_port": port},
            "refit": {"interval_s": 0},
            "routing": {"enabled": True, "mode": "enforce"},
        }
    )
    with build_runtime(config, registry=None) as rt:
        state = rt.routing
        assert state is not None
        state.holder.table = PairRiskTable({("a", "b"): PairRisk(-0.1, 0.01)}, created_at=time.time() - 7200)
        scrape = [{"job_name": "prod", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}]
        with prometheus_server(tmp_path, [], [RULES], scrape_configs=scrape) as prom:
            decisions, age = _routing_targets().values()
            assert prom.wait_for(lambda: bool(prom.query("handoffmon_routing_decisions_total")), 30), (
                prom.log_tail()
            )
            deadline = time.monotonic() + 30

            def reordered_rate() -> float:
                for _ in range(20):  # keeps the counter moving while Prometheus scrapes
                    state.counts.count("enforce", "reordered")
                rows = prom.query(substitute(decisions, VALUES))
                return sum(
                    float(r["value"][1])
                    for r in rows
                    if r["metric"] == {"mode": "enforce", "outcome": "reordered"}
                )

            while reordered_rate() <= 0:
                assert time.monotonic() < deadline, "no reordered rate on the decisions panel"
                time.sleep(1)
            rows = prom.query(substitute(decisions, VALUES))
            assert {(r["metric"]["mode"], r["metric"]["outcome"]) for r in rows} >= {("dry_run", "stale")}
            assert prom.query(substitute(decisions, {**VALUES, "job": "staging"})) == []
            (age_row,) = prom.query(substitute(age, VALUES))
            assert 7200 <= float(age_row["value"][1]) < 7300
            (stale,) = [r for r in alert_rules() if r["alert"] == "RoutingTableStale"]
            (fired,) = prom.query(stale["expr"])
            assert fired["metric"]["job"] == "prod"
            assert prom.wait_for(
                lambda: any(a["labels"]["alertname"] == "RoutingTableStale" for a in prom.alerts()), 30
            ), prom.alerts()
            state.holder.table = PairRiskTable({}, created_at=time.time())  # a refit lands: quiet again
            assert prom.wait_for(lambda: prom.query(stale["expr"]) == [], 30)
