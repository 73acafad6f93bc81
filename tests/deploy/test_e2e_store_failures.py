"""StoreFailures on a real Prometheus scraping real runtimes: the shipped expression (a ratio of
failed store calls to store calls, ``handoffmon_store_operations_total``) finds the replica whose
Redis is unreachable and not the healthy one, so the two series it divides come from the same
target with the same labels.

Two wrap-mode runtimes serve a real ``litellm.Router`` (``mock_response``): ``broken`` points its
store at a Redis port nobody listens on (every call fails, then is skipped while the guard backs
off), ``healthy`` keeps the memory store. Prometheus scrapes both as two jobs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytest.importorskip("litellm")

from handoffmon import build_runtime
from handoffmon.config import config_from_mapping
from handoffmon.integrations import wrap
from tests.conftest import free_port
from tests.deploy.shipped import alert_rules
from tests.promserver import PromServer, prometheus_server
from tests.shadow.test_runner import CANONICAL, RULES, _converse, _router

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]  # real Prometheus: ~10 s


def _expr(name: str) -> str:
    (alert,) = [a for a in alert_rules() if a["alert"] == name]
    return str(alert["expr"])


def _runtime(port: int, store: dict[str, Any]) -> Any:
    config = config_from_mapping(
        {
            "rules": RULES,
            "attribution": {"canonical_models": CANONICAL},
            "telemetry": {"log_turns": False, "metrics_port": port},
            "refit": {"interval_s": 0},
            "store": store,
        }
    )
    return build_runtime(config, registry=None)


@pytest.fixture
def two_deployments(tmp_path: Path) -> Iterator[tuple[PromServer, list[tuple[Any, Any]]]]:
    ports = {"broken": free_port(), "healthy": free_port()}
    stores = {
        "broken": {"backend": "redis", "url": f"redis://127.0.0.1:{free_port()}/0", "timeout_s": 0.2},
        "healthy": {"backend": "memory"},
    }
    with ExitStack() as stack:
        runtimes = [stack.enter_context(_runtime(ports[job], stores[job])) for job in ports]
        clients = [(wrap(_router(), runtime=rt), rt) for rt in runtimes]
        scrape = [
            {"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
            for job, port in ports.items()
        ]
        prom = stack.enter_context(prometheus_server(tmp_path, [], scrape_configs=scrape))
        assert prom.wait_for(lambda: len(prom.query("handoffmon_build_info")) == 2, 30), prom.log_tail()
        yield prom, clients


def test_store_failures_ratio_finds_the_replica_whose_redis_is_down(
    two_deployments: tuple[PromServer, list[tuple[Any, Any]]],
) -> None:
    """Conversations of three turns on each deployment until the shipped StoreFailures expression
    (without `for`) returns the broken replica's gets: every get failed or was skipped, and each
    is one operation, so the ratio is 1 (100% of its calls); nothing for the healthy one, whose
    gets were counted too; MonitorErrors leaves the store stage to it."""
    prom, clients = two_deployments
    found: list[dict[str, Any]] = []

    def failing() -> bool:
        for i, (client, rt) in enumerate(clients):
            _converse(client, rt, ["alpha", "backup", "alpha"], f"c{i}-{len(found)}")
        found[:] = prom.query(_expr("StoreFailures"))
        return any(r["metric"]["op"] == "get" for r in found)

    assert prom.wait_for(failing, 40), (found, prom.query("handoffmon_store_failures_total > 0"))
    assert {r["metric"]["job"] for r in found} == {"broken"}, found
    ratios = {r["metric"]["op"]: float(r["value"][1]) for r in found}
    # every get failed or was skipped, divided by the gets of the same target (a denominator
    # that matched nothing would fall back to 0: +Inf)
    assert ratios["get"] == pytest.approx(1.0, rel=0.02), ratios
    assert prom.query(_expr("MonitorErrors")) == []

    def scraped(query: str) -> float:
        found = prom.query(query)
        return float(found[0]["value"][1]) if found else 0.0

    # the healthy one's first conversation (3 turns) reaches a scrape
    assert prom.wait_for(lambda: scraped('sum(handoffmon_turns_total{job="healthy"})') >= 3, 20)
    assert scraped('sum(handoffmon_store_operations_total{job="healthy", op="get"})') >= 3
