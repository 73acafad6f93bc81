"""A real Prometheus scrapes a running handoffmon /metrics; documented PromQL returns the planted ratios."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from handoffmon.exporters.prometheus import PrometheusExporter
from handoffmon.exporters.serving import start_metrics_server
from tests.conftest import free_port, require_binary
from tests.exporters.turns import make_result
from tests.promserver import PromServer, _ready, prometheus_server, write_config

pytestmark = pytest.mark.integration

ADHERENCE_BY_DEPTH = (
    'sum by (depth_bucket) (handoffmon_checks_total{verdict="pass"})'
    ' / sum by (depth_bucket) (handoffmon_checks_total{verdict=~"pass|fail"})'
)
HANDOFF_TURNS = (
    'sum(handoffmon_turns_total{prefix_model!~"none|unknown"}'
    " unless on (prefix_model, model)"
    ' label_replace(sum by (model) (handoffmon_turns_total), "prefix_model", "$1", "model", "(.+)"))'
)
DECIDED_TURNS = 'sum(handoffmon_turns_total{prefix_model!~"none|unknown"})'


def plant(exp: PrometheusExporter) -> None:
    """Adherence 0.8 at depth 1, 0.5 at depth 2, 0.25 at 3-4 (n/a and error do not count); 4 handoffs."""
    plan = {1: (8, 2), 2: (3, 3), 3: (1, 3)}
    for depth, (passes, fails) in plan.items():
        for i in range(passes + fails):
            author = "gpt" if i % 2 else "claude"
            prefix = "none" if depth == 1 else ("gpt" if i < 4 else author)
            checks = [("json", "pass" if i < passes else "fail"), ("lang", "not_applicable")]
            exp.export(
                make_result(
                    conversation_id=f"c{depth}-{i}",
                    depth=depth,
                    author=author,
                    prefix_model=prefix,
                    checks=checks,
                )
            )
    exp.export(make_result(depth=3, author="gpt", prefix_model="unknown", checks=[("json", "error")]))


@pytest.mark.slow
def test_real_prometheus_adherence_by_depth_and_handoff_rate(tmp_path: Path) -> None:
    """Prometheus 2.x scrapes /metrics; adherence by depth bucket and the documented handoff PromQL match."""
    exp = PrometheusExporter(CollectorRegistry(), multiprocess=False)
    plant(exp)
    with (
        start_metrics_server(exp.registry, 0) as server,
        prometheus_server(tmp_path, [f"127.0.0.1:{server.port}"]) as prom,
    ):
        assert prom.wait_for(lambda: len(prom.query(ADHERENCE_BY_DEPTH)) == 3, timeout_s=30), prom.log_tail()
        got = {r["metric"]["depth_bucket"]: float(r["value"][1]) for r in prom.query(ADHERENCE_BY_DEPTH)}
        assert got == {"1": 0.8, "2": 0.5, "3-4": 0.25}
        # depth 2 and 3: i < 4 have prefix gpt → claude authors (even i) are handoffs: i = 0, 2 → 2 per depth
        assert float(prom.query(HANDOFF_TURNS)[0]["value"][1]) == 4
        assert float(prom.query(DECIDED_TURNS)[0]["value"][1]) == 10
        up = prom.query('up{job="handoffmon"}')
        assert [float(r["value"][1]) for r in up] == [1.0]


@pytest.mark.slow
def test_real_prometheus_stores_conversation_id_exemplars(tmp_path: Path) -> None:
    """With telemetry.exemplars, Prometheus (exemplar storage on) keeps conversation ids as exemplars."""
    exp = PrometheusExporter(CollectorRegistry(), exemplars=True, multiprocess=False)
    exp.export(make_result(conversation_id="conv-exemplar-e2e", checks=[("json", "pass")]))
    with start_metrics_server(exp.registry, 0) as server:
        port = free_port()
        config = write_config(tmp_path / "prometheus.yml", [f"127.0.0.1:{server.port}"])
        log_path = tmp_path / "prometheus.log"
        args = [
            require_binary("prometheus"),
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--enable-feature=exemplar-storage",
            "--log.level=warn",
        ]
        with log_path.open("wb") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        prom = PromServer(
            url=f"http://127.0.0.1:{port}", proc=proc, data_dir=tmp_path / "tsdb", log_path=log_path
        )
        try:
            assert prom.wait_for(lambda: _ready(prom), 30, 0.2), prom.log_tail()

            def exemplars() -> list:
                now = time.time()
                params = {"query": "handoffmon_turns_total", "start": str(now - 300), "end": str(now + 60)}
                return [e for s in prom.api("query_exemplars", params) for e in s["exemplars"]]

            assert prom.wait_for(lambda: bool(exemplars()), 30), prom.log_tail()
            assert exemplars()[0]["labels"] == {"conversation_id": "conv-exemplar-e2e"}
        finally:
            proc.terminate()
            proc.wait(timeout=15)
