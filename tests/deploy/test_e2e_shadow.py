"""The shadow-continuation panels on a real Prometheus scraping a runtime with shadow continuation on.
The recorded demo traffic of ``test_e2e_prometheus`` runs without it, so its series are absent
there; here a wrapped real ``litellm.Router`` (deployments answer ``mock_response``) makes shadow
calls, a refit publishes the switch-cost gauges, and the runtime serves its ``/metrics``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytest.importorskip("litellm")

from handoffmon import build_runtime
from handoffmon.integrations import wrap
from tests.conftest import free_port
from tests.deploy.shipped import TEMPLATE_VALUES, dashboard, panel_targets, substitute
from tests.promserver import prometheus_server
from tests.shadow.test_persisted import shadow_config
from tests.shadow.test_runner import _converse, _router

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

VALUES = {**TEMPLATE_VALUES, "__rate_interval": "10s"}
SHADOW = ("handoffmon_shadow_", "handoffmon_switch_cost")


def _shadow_targets() -> dict[str, str]:
    return {
        f"{t} [{i}]": e for i, (t, e) in enumerate(panel_targets(dashboard())) if any(s in e for s in SHADOW)
    }


def test_every_shadow_panel_query_returns_data_for_its_deployment_only(tmp_path: Path) -> None:
    """Shadow calls, skips, pair checks, budget, breakers and the refit's switch costs reach every
    shadow panel for job=prod while traffic flows, and nothing for job=staging."""
    port = free_port()
    config = shadow_config(metrics_port=port, refit={"interval_s": 3600, "min_n": 1})
    targets = _shadow_targets()
    assert len(targets) >= 9, targets
    with build_runtime(config, registry=None) as rt:
        client = wrap(_router(), runtime=rt)
        scrape = [{"job_name": "prod", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}]
        with prometheus_server(tmp_path, [], scrape_configs=scrape) as prom:
            assert prom.wait_for(lambda: bool(prom.query("handoffmon_build_info")), 30), prom.log_tail()
            missing: dict[str, Any] = dict(targets)
            deadline, i = time.monotonic() + 60, 0
            while missing and time.monotonic() < deadline:
                _converse(client, rt, ["alpha", "alpha", "primary"], f"c{i}")  # keeps counters moving
                i += 1
                assert rt.refit_now() is not None
                missing = {t: e for t, e in missing.items() if not prom.query(substitute(e, VALUES))}
            assert not missing, f"shadow panels without data: {missing}"
            for title, expr in targets.items():
                assert prom.query(substitute(expr, {**VALUES, "job": "staging"})) == [], title
