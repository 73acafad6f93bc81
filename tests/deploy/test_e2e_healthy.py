"""Every dashboard panel on a real Prometheus scraping a healthy wrap-mode deployment: a panel a
healthy deployment leaves empty says why (Grafana's ``noValue``), any other panel has data.

A wrapped real ``litellm.Router`` (deployments answer ``mock_response``) serves two models that
take turns in conversations; nothing falls back, routing, shadow continuation and ``serve`` are
off. Checked before the first refit and after it: "No data" on a panel without an explanation
would be a query that reads a series this deployment does not export, or a wrong label.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytest.importorskip("litellm")

from handoffmon import build_runtime
from handoffmon.config import config_from_mapping
from handoffmon.integrations import wrap
from tests.conftest import free_port
from tests.deploy.shipped import TEMPLATE_VALUES, dashboard, panels, substitute
from tests.promserver import PromServer, prometheus_server
from tests.shadow.test_runner import CANONICAL, RULES, _converse, _router

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]  # 6-9 s each: the slow phase

VALUES = {**TEMPLATE_VALUES, "__rate_interval": "10s"}
CONVERSATIONS = (
    ["alpha", "backup", "alpha"],
    ["alpha", "alpha", "alpha"],
    ["backup", "backup", "backup"],
    ["backup", "alpha", "backup"],
)
"""model-c and model-b hand conversations to each other and keep their own: all four cells."""


def _panels() -> list[dict[str, Any]]:
    return [p for p in panels(dashboard()) if p.get("targets")]


def _empty(prom: PromServer) -> dict[str, bool]:
    """Panel title -> whether every query of the panel returns nothing."""
    return {
        p["title"]: all(not prom.query(substitute(t["expr"], VALUES)) for t in p["targets"])
        for p in _panels()
    }


def _unexplained(prom: PromServer) -> list[str]:
    explained = {p["title"] for p in _panels() if p.get("fieldConfig", {}).get("defaults", {}).get("noValue")}
    return sorted(t for t, empty in _empty(prom).items() if empty and t not in explained)


def test_every_panel_a_healthy_deployment_leaves_empty_says_why(tmp_path: Path) -> None:
    """Before the refit the refit panels are empty and say "No refit yet"; after it they have data.
    At both moments every empty panel carries a noValue text (fallbacks none, routing, shadow and
    serve off), and every panel without one has data."""
    port = free_port()
    config = config_from_mapping(
        {
            "rules": RULES,
            "attribution": {"canonical_models": CANONICAL},
            "telemetry": {"log_turns": False, "metrics_port": port},
            "refit": {"interval_s": 3600, "min_n": 1},
        }
    )
    with build_runtime(config, registry=None) as rt:
        client = wrap(_router(), runtime=rt)
        scrape = [{"job_name": "prod", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}]
        with prometheus_server(tmp_path, [], scrape_configs=scrape) as prom:
            assert prom.wait_for(lambda: bool(prom.query("handoffmon_build_info")), 30), prom.log_tail()
            turns = 0

            def converse() -> None:
                nonlocal turns
                for groups in CONVERSATIONS:  # keeps the counters moving while Prometheus scrapes
                    _converse(client, rt, groups, f"c{turns}")
                    turns += 1

            def settled(refit: bool) -> bool:
                converse()
                return not _unexplained(prom) and (not refit or not _empty(prom)[refit_panel])

            refit_panel = next(p["title"] for p in _panels() if "Prefix influence" in p["title"])
            assert prom.wait_for(lambda: settled(refit=False), 40), _unexplained(prom)
            before = _empty(prom)
            assert before[refit_panel], "the refit panels have data before any refit"
            assert rt.refit_now() is not None
            assert prom.wait_for(lambda: settled(refit=True), 40), _unexplained(prom)
            after = _empty(prom)
    explained = {p["title"] for p in _panels() if p.get("fieldConfig", {}).get("defaults", {}).get("noValue")}
    assert not [t for t, empty in after.items() if empty and t not in explained]
    # what the explanations cover on this deployment: refit panels filled by the refit, the
    # features that are off and the fallbacks that never happened still empty
    filled = {t for t in before if before[t] and not after[t]}
    assert any("Δ matrix" in t for t in filled) and refit_panel in filled, filled
    still_empty = {t for t, empty in after.items() if empty}
    for needle in ("Router fallbacks", "Risk-aware routing", "Shadow calls", "handoffmon serve: requests"):
        assert any(needle in t for t in still_empty), (needle, still_empty)
