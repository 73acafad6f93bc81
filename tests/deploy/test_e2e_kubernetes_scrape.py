"""deploy/prometheus/prometheus-kubernetes.yml (the scrape jobs for a cluster without the Prometheus
Operator) on a real Prometheus, a real runtime and a real Pushgateway.

No cluster here, and Debian's Prometheus is built without Kubernetes service discovery, so each
job's ``kubernetes_sd_configs`` is swapped for a ``file_sd_configs`` that lists the targets a pod
discovery would: the same ``__meta_kubernetes_*`` labels, which the shipped ``relabel_configs``
(unchanged) keep, drop and copy.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, Gauge, push_to_gateway

from handoffmon import build_runtime
from handoffmon.config import config_from_mapping
from handoffmon.sources.prometheus import parse_match
from tests.conftest import free_port
from tests.deploy.servers import pushgateway
from tests.deploy.shipped import DEPLOY, RULES, load_yaml
from tests.promserver import prometheus_server

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]  # 6-9 s each: the slow phase

SCRAPE = DEPLOY / "prometheus" / "prometheus-kubernetes.yml"
TOKEN = "k8s-scrape-token"
NAMESPACE = "llm"


def _pod(address: str, name: str, port: str, namespace: str, phase: str = "Running") -> dict[str, Any]:
    """A target group as Kubernetes pod discovery gives it (one target per container port)."""
    return {
        "targets": [address],
        "labels": {
            "__meta_kubernetes_pod_label_app_kubernetes_io_name": name,
            "__meta_kubernetes_pod_container_port_name": port,
            "__meta_kubernetes_namespace": namespace,
            "__meta_kubernetes_pod_name": f"{name}-{port}-{phase.lower()}",
            "__meta_kubernetes_pod_phase": phase,
        },
    }


def test_kubernetes_scrape_jobs_give_the_identity_the_rules_and_the_refit_job_select(tmp_path: Path) -> None:
    """Only the serve pods' http port is scraped (with the token), carrying job=handoffmon and the
    pod's namespace, which the refit CronJob's --match selects; the Pushgateway's gauges keep
    the namespace they were pushed with, not the gateway pod's."""
    shipped = load_yaml(SCRAPE)
    assert shipped["rule_files"] == [RULES.name]
    (tmp_path / "handoffmon-token").write_text(TOKEN, encoding="utf-8")  # credentials_file is relative
    port = free_port()
    config = config_from_mapping(
        {
            "telemetry": {"log_turns": False, "metrics_port": port, "metrics_token": TOKEN},
            "refit": {"interval_s": 0},
        }
    )
    with build_runtime(config, registry=None), pushgateway(tmp_path) as gateway:
        registry = CollectorRegistry()
        Gauge("handoffmon_refit_last_success_timestamp_seconds", "t", registry=registry).set(time.time())
        push_to_gateway(
            gateway.address, job="handoffmon", grouping_key={"namespace": NAMESPACE}, registry=registry
        )
        serve = f"127.0.0.1:{port}"
        groups = [
            _pod(serve, "handoffmon", "http", NAMESPACE),
            _pod(serve, "handoffmon", "debug", NAMESPACE),  # another container port: not scraped
            _pod(serve, "handoffmon-redis", "http", NAMESPACE),  # another app: not scraped
            _pod(f"127.0.0.1:{free_port()}", "handoffmon", "http", NAMESPACE, phase="Pending"),
            _pod(gateway.address.removeprefix("http://"), "handoffmon-pushgateway", "http", "monitoring"),
        ]
        sd = tmp_path / "pods.json"
        sd.write_text(json.dumps(groups), encoding="utf-8")
        jobs = []
        for job in shipped["scrape_configs"]:
            assert job.pop("kubernetes_sd_configs") == [{"role": "pod"}]
            jobs.append({**job, "file_sd_configs": [{"files": [str(sd)], "refresh_interval": "1s"}]})
        with prometheus_server(tmp_path, [], [RULES], scrape_configs=jobs) as prom:
            assert prom.wait_for(lambda: len(prom.query("up")) == 2, 30), prom.log_tail()
            targets = {s["metric"]["job"]: s for s in prom.query("up")}
            assert set(targets) == {"handoffmon", "handoffmon-pushgateway"}
            assert targets["handoffmon"]["metric"]["namespace"] == NAMESPACE
            assert targets["handoffmon"]["metric"]["pod"] == "handoffmon-http-running"
            assert prom.wait_for(lambda: prom.query('up{job="handoffmon"} == 1') != [], 30), prom.log_tail()
            # the refit CronJob selects this deployment's counters with its --match
            (args,) = _cronjob_args()
            match = args[args.index("--match") + 1].replace("$(POD_NAMESPACE)", NAMESPACE)
            selector = "{" + parse_match(match) + "}"
            assert prom.wait_for(lambda: bool(prom.query(f"handoffmon_build_info{selector}")), 30)
            # the Pushgateway's gauges keep the pushed identity (honor_labels)
            pushed = 'handoffmon_refit_last_success_timestamp_seconds{job="handoffmon", namespace="llm"}'
            assert prom.wait_for(lambda: bool(prom.query(pushed)), 30), prom.log_tail()
            assert not prom.query('{namespace="monitoring", __name__=~"handoffmon_.*"}')


def _cronjob_args() -> list[list[str]]:
    docs = [d for d in yaml.safe_load_all((DEPLOY / "k8s" / "cronjob.yaml").read_text(encoding="utf-8")) if d]
    cron = next(d for d in docs if d["kind"] == "CronJob")
    return [c["args"] for c in cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]]
