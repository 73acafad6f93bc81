"""Compose and Kubernetes manifests parse and carry what a deployment needs; Prometheus config is valid."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import require_binary
from tests.deploy.shipped import DEPLOY, PROM_CONFIG, ROOT, RULES, from_rules_tool, load_yaml

K8S = DEPLOY / "k8s"


def _k8s_docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        docs.extend(d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d)
    return docs


def test_promtool_check_config_accepts_the_example_prometheus_config(tmp_path: Path) -> None:
    """`promtool check config` validates the scrape config and the rule file it loads."""
    promtool = require_binary("promtool")
    for name in (PROM_CONFIG.name, "handoffmon-rules.yml"):
        shutil.copy(PROM_CONFIG.parent / name, tmp_path / name)
    proc = subprocess.run(
        [promtool, "check", "config", str(tmp_path / PROM_CONFIG.name)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 rule files found" in proc.stdout
    jobs = {j["job_name"] for j in load_yaml(PROM_CONFIG)["scrape_configs"]}
    assert "handoffmon" in jobs


def test_compose_runs_handoffmon_litellm_prometheus_grafana_and_optional_redis() -> None:
    """The compose stack has the five services, redis behind a profile, and every mounted
    local file exists."""
    compose = load_yaml(DEPLOY / "docker-compose.yml")
    services = compose["services"]
    assert {"handoffmon", "litellm", "prometheus", "grafana", "redis"} <= set(services)
    assert services["redis"]["profiles"] == ["redis"]
    assert services["handoffmon"]["command"][0] == "serve"
    assert "http://litellm:4000" in services["handoffmon"]["command"]
    for name, svc in services.items():
        for volume in svc.get("volumes", []):
            src = volume.split(":", 1)[0]
            if src.startswith("./"):
                assert (DEPLOY / src).exists(), (name, src)
    build = services["handoffmon"]["build"]
    assert (DEPLOY / build["context"] / build["dockerfile"]).is_file()


def _config_check(path: Path) -> str:
    """`handoffmon config check PATH` (schema plus every rule's checker and params); its output."""
    from click.testing import CliRunner

    from handoffmon.cli import main

    result = CliRunner().invoke(main, ["config", "check", str(path)])
    assert result.exit_code == 0, result.output
    return result.output


def test_compose_handoffmon_config_passes_config_check() -> None:
    """The config the compose stack mounts passes `handoffmon config check` and listens where
    compose and Prometheus expect it."""
    from handoffmon.config import load_config

    path = DEPLOY / "handoffmon" / "handoffmon.yaml"
    assert "4 rule(s)" in _config_check(path)
    cfg = load_config(path)
    assert cfg.proxy.port == 4100 and cfg.proxy.host == "0.0.0.0"
    assert "handoffmon:4100" in load_yaml(PROM_CONFIG)["scrape_configs"][0]["static_configs"][0]["targets"]


def test_k8s_manifests_have_the_required_kinds_and_fields() -> None:
    """Deployment, Service, ConfigMap, ServiceMonitor and a refit CronJob, each with the
    fields a cluster would reject them without; labels and ports line up."""
    docs = _k8s_docs()
    kinds = {d["kind"]: d for d in docs}
    assert {"Deployment", "Service", "ConfigMap", "ServiceMonitor", "CronJob"} <= set(kinds)
    for d in docs:
        assert d["apiVersion"] and d["metadata"]["name"], d
    dep = kinds["Deployment"]
    pod = dep["spec"]["template"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    container = pod["spec"]["containers"][0]
    assert container["args"][0] == "serve"
    port_names = {p["name"] for p in container["ports"]}
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    svc = kinds["Service"]
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert svc["spec"]["ports"][0]["targetPort"] in port_names
    mon = kinds["ServiceMonitor"]
    assert mon["apiVersion"] == "monitoring.coreos.com/v1"
    assert mon["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert mon["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"]
    assert mon["spec"]["endpoints"][0]["path"] == "/metrics"
    cron = kinds["CronJob"]["spec"]
    args = cron["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "refit"
    assert args[args.index("--source") + 1].startswith("prometheus://")
    assert "--out" in args
    mounted = pod["spec"]["volumes"][0]["configMap"]["name"]
    assert mounted == kinds["ConfigMap"]["metadata"]["name"]


def test_k8s_configmap_holds_a_valid_handoffmon_config(tmp_path: Path) -> None:
    """The ConfigMap's handoffmon.yaml passes `handoffmon config check` with the Redis store
    (replicas share attribution)."""
    cm = next(d for d in _k8s_docs() if d["kind"] == "ConfigMap")
    path = tmp_path / "handoffmon.yaml"
    path.write_text(cm["data"]["handoffmon.yaml"], encoding="utf-8")
    assert "store=redis" in _config_check(path)


def test_prometheusrule_carries_the_shipped_rule_groups_unchanged() -> None:
    """The operator's PrometheusRule holds exactly the rules file's groups and is what
    deploy/tools/from_rules.py writes."""
    rule = load_yaml(K8S / "prometheusrule.yaml")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["kind"] == "PrometheusRule"
    assert rule["spec"]["groups"] == load_yaml(RULES)["groups"]
    text = (K8S / "prometheusrule.yaml").read_text(encoding="utf-8")
    assert text == from_rules_tool().render_prometheus_rule(RULES)


def test_kustomization_lists_every_manifest() -> None:
    """`kubectl apply -k deploy/k8s` applies every manifest file in the directory."""
    kust = load_yaml(K8S / "kustomization.yaml")
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kust["resources"]) == files


def test_dockerfile_installs_the_package_and_runs_serve() -> None:
    """The image installs handoffmon with the proxy extra and defaults to `serve`."""
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    assert '".[proxy,redis]"' in text
    assert 'ENTRYPOINT ["handoffmon"]' in text and '"serve"' in text
    for copied in ("pyproject.toml", "README.md", "LICENSE", "handoffmon"):
        assert (ROOT / copied).exists()
