"""Compose and Kubernetes manifests parse and carry what a deployment needs; Prometheus config is valid."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from handoffmon.sources.prometheus import parse_match
from tests.conftest import require_binary, require_redis
from tests.deploy.shipped import (
    ALERTING_DOC,
    DEPLOY,
    PROM_CONFIG,
    ROOT,
    RULES,
    from_rules_tool,
    load_yaml,
)

K8S = DEPLOY / "k8s"


def _k8s_docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        docs.extend(d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d)
    return docs


def test_promtool_check_config_accepts_the_example_prometheus_config(tmp_path: Path) -> None:
    """`promtool check config` validates the scrape config and the rule file it loads, once the
    token file is created the way docs/operations/alerting.md says (compose mounts it there)."""
    promtool = require_binary("promtool")
    for name in (PROM_CONFIG.name, "handoffmon-rules.yml"):
        shutil.copy(PROM_CONFIG.parent / name, tmp_path / name)
    documented = [
        line.split("#")[0]
        for line in ALERTING_DOC.read_text(encoding="utf-8").splitlines()
        if "> handoffmon-token" in line
    ]
    assert len(documented) == 1, documented
    env = {k: v for k, v in os.environ.items() if k != "HANDOFFMON_METRICS_TOKEN"}
    subprocess.run(["bash", "-c", documented[0]], cwd=tmp_path, env=env, check=True, timeout=10)
    assert (tmp_path / "handoffmon-token").read_text().strip()
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
    kinds = {
        d["kind"]: d
        for d in docs
        if d["metadata"]["name"] in ("handoffmon", "handoffmon-config", "handoffmon-refit")
    }
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
    pushed = {args[i + 1] for i, a in enumerate(args) if a == "--push-label"}
    assert "job=handoffmon" in pushed and "namespace=$(POD_NAMESPACE)" in pushed
    # the refit reads only this deployment's counters: the identity it pushes its gauges under
    selector = args[args.index("--match") + 1]
    assert parse_match(selector) == 'job="handoffmon",namespace="$(POD_NAMESPACE)"', selector
    gateway = args[args.index("--pushgateway") + 1].split(":")[0]
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    assert ("Service", gateway) in by_name
    gw_monitor = by_name[("ServiceMonitor", "handoffmon-pushgateway")]
    assert gw_monitor["spec"]["endpoints"][0]["honorLabels"] is True
    mounted = pod["spec"]["volumes"][0]["configMap"]["name"]
    assert mounted == kinds["ConfigMap"]["metadata"]["name"]


def test_k8s_configmap_holds_a_valid_handoffmon_config(tmp_path: Path) -> None:
    """The ConfigMap's handoffmon.yaml passes `handoffmon config check` with the Redis store
    (replicas share attribution)."""
    cm = next(d for d in _k8s_docs() if d["kind"] == "ConfigMap")
    path = tmp_path / "handoffmon.yaml"
    path.write_text(cm["data"]["handoffmon.yaml"], encoding="utf-8")
    assert "store=redis" in _config_check(path)


@pytest.mark.integration
def test_k8s_replicas_without_in_process_refit_export_no_success_timestamp(tmp_path: Path) -> None:
    """The ConfigMap turns the replicas' own refit off (refit.interval_s: 0; the CronJob pushes
    the gauges): a replica built from it, with the real Redis store, serves its counters but no
    handoffmon_refit_last_success_timestamp_seconds. A 0 from every replica made RefitStale's
    "none published while turns flow" branch dead and its description say "20794d old"."""
    from prometheus_client import generate_latest

    from handoffmon.config import load_config
    from handoffmon.runtime import build_runtime

    require_redis()
    cm = next(d for d in _k8s_docs() if d["kind"] == "ConfigMap")
    path = tmp_path / "handoffmon.yaml"
    path.write_text(cm["data"]["handoffmon.yaml"], encoding="utf-8")
    config = load_config(path, environ={"HANDOFFMON_STORE__URL": "redis://127.0.0.1:6379/0"})
    assert config.refit.interval_s == 0
    with build_runtime(config, registry=None) as rt:
        assert rt.refit is None
        text = generate_latest(rt.registry).decode()
    assert "handoffmon_build_info{" in text and "handoffmon_turns_total" in text
    assert "handoffmon_refit_last_success_timestamp_seconds" not in text


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


def _workloads() -> list[tuple[str, dict[str, Any]]]:
    """(name, pod spec) of every Deployment and CronJob."""
    out = []
    for d in _k8s_docs():
        if d["kind"] == "Deployment":
            out.append((d["metadata"]["name"], d["spec"]["template"]["spec"]))
        elif d["kind"] == "CronJob":
            out.append((d["metadata"]["name"], d["spec"]["jobTemplate"]["spec"]["template"]["spec"]))
    return out


def test_images_are_pinned_and_never_latest_with_always() -> None:
    """Every image has a fixed tag (handoffmon's comes from kustomize `images:` = the package
    version); no `latest`, no `imagePullPolicy: Always`."""
    from handoffmon._version import __version__

    kust = load_yaml(K8S / "kustomization.yaml")
    pins = {i["name"]: i for i in kust["images"]}
    assert pins["handoffmon"]["newTag"] == __version__
    for name, pod in _workloads():
        for c in pod["containers"]:
            image = c["image"]
            assert c.get("imagePullPolicy") == "IfNotPresent", (name, c["name"])
            assert "latest" not in image, (name, image)
            assert image in pins or re.fullmatch(r"[\w./-]+:[\w.-]+", image), (name, image)


def test_uid_10001_pods_have_fsgroup_so_volumes_are_writable() -> None:
    """The handoffmon pods (serve and the refit job writing to a PVC) set fsGroup."""
    for name, pod in _workloads():
        ctx = pod.get("securityContext", {})
        assert ctx.get("runAsNonRoot") is True, name
        if ctx.get("runAsUser") == 10001:
            assert ctx.get("fsGroup") == 10001, name


def test_release_label_selects_servicemonitors_and_rules_in_kube_prometheus_stack() -> None:
    """kustomize's `labels` transformer adds `release` (kube-prometheus-stack's default selector)
    to ServiceMonitors and the PrometheusRule without touching any selector."""
    kust = load_yaml(K8S / "kustomization.yaml")
    (entry,) = kust["labels"]
    assert "release" in entry["pairs"]
    assert entry["includeSelectors"] is False and entry["includeTemplates"] is False
    kinds = {d["kind"] for d in _k8s_docs()}
    assert {"ServiceMonitor", "PrometheusRule"} <= kinds


def test_metrics_need_a_bearer_token_from_a_secret_and_prometheus_sends_it(tmp_path: Path) -> None:
    """The serve pods listen on 0.0.0.0, so /metrics requires telemetry.metrics_token (from the
    handoffmon-metrics Secret; serve refuses to start without it), and the ServiceMonitor
    authenticates with the same Secret. The pod's ConfigMap and environment load as one config
    (a moved key would stop the pod)."""
    from handoffmon.config import load_config

    docs = {(d["kind"], d["metadata"]["name"]): d for d in _k8s_docs()}
    pod = docs[("Deployment", "handoffmon")]["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    ref = env["HANDOFFMON_TELEMETRY__METRICS_TOKEN"]["valueFrom"]["secretKeyRef"]
    endpoint = docs[("ServiceMonitor", "handoffmon")]["spec"]["endpoints"][0]
    assert endpoint["authorization"]["type"] == "Bearer"
    assert endpoint["authorization"]["credentials"] == {"name": ref["name"], "key": ref["key"]}
    cm = docs[("ConfigMap", "handoffmon-config")]
    path = tmp_path / "handoffmon.yaml"
    path.write_text(cm["data"]["handoffmon.yaml"], encoding="utf-8")
    environ = {name: e.get("value", "from-the-secret") for name, e in env.items()}
    config = load_config(path, environ=environ)
    assert config.proxy.host == "0.0.0.0" and config.telemetry.metrics_token == "from-the-secret"


def test_redis_is_shipped_where_the_configmap_points() -> None:
    """store.url redis://redis:6379 resolves to the shipped Redis Service and its pods."""
    docs = {(d["kind"], d["metadata"]["name"]): d for d in _k8s_docs()}
    cm = yaml.safe_load(docs[("ConfigMap", "handoffmon-config")]["data"]["handoffmon.yaml"])
    assert cm["store"]["url"].startswith("redis://redis:6379")
    svc = docs[("Service", "redis")]
    dep = docs[("Deployment", "redis")]
    assert svc["spec"]["ports"][0]["port"] == 6379
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()


def test_compose_litellm_config_fails_over_in_a_real_router() -> None:
    """deploy/litellm/config.yaml loads into a real litellm.Router (model_list + router_settings,
    as the proxy does) and a share of `general` requests is served by `backup` after a
    fallback, so the local stack shows fallback handoffs; the rest is served by `general`."""
    import os

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    config = load_yaml(DEPLOY / "litellm" / "config.yaml")
    router = litellm.Router(model_list=config["model_list"], **config["router_settings"])
    served: dict[str, int] = {}
    for i in range(40):
        resp = router.completion(model="general", messages=[{"role": "user", "content": f"ticket {i}"}])
        model_id = resp._hidden_params["model_id"]
        served[model_id] = served.get(model_id, 0) + 1
        if model_id == "backup-mock":
            headers = resp._hidden_params.get("additional_headers") or {}
            assert int(headers.get("x-litellm-attempted-fallbacks") or 0) >= 1
    assert set(served) == {"general-mock", "backup-mock"}, served
    assert 5 <= served["backup-mock"] <= 35, served


def _bind_mounts(service: dict[str, Any]) -> list[tuple[Path, str]]:
    """A compose service's bind mounts of local paths as (local path, container path); short
    (`./src:/target:ro`) and long (`type: bind`) syntax, named volumes left out."""
    mounts: list[tuple[Path, str]] = []
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            src, target = str(volume.get("source", "")), str(volume.get("target", ""))
        else:
            src, target = [*str(volume).split(":"), ""][:2]
        if src.startswith("."):
            mounts.append(((DEPLOY / src).resolve(), target.rstrip("/")))
    return mounts


def _local_files(service: dict[str, Any], container_path: str) -> list[Path]:
    """The local files a service sees at or under `container_path` through its bind mounts."""
    container_path = container_path.rstrip("/")
    found: list[Path] = []
    for local, target in _bind_mounts(service):
        if container_path == target or container_path.startswith(target + "/"):
            local = local / container_path[len(target) :].lstrip("/")  # the mount covers the path
        elif not target.startswith(container_path + "/"):
            continue  # else: the mount lies inside the path
        found.extend(sorted(f for f in local.rglob("*") if f.is_file()) if local.is_dir() else [local])
    return [f for f in found if f.exists()]


def _has_alert_rules(path: Path) -> bool:
    """A YAML rules file (Prometheus or Grafana provisioning format) with an alerting rule."""
    if path.suffix not in (".yml", ".yaml"):
        return False
    doc = load_yaml(path) or {}
    rules = [r for g in doc.get("groups") or [] for r in g.get("rules") or []]
    return any("alert" in r or "title" in r for r in rules)


def _alert_paths(compose: dict[str, Any]) -> set[str]:
    """Which alert paths a compose file provisions: "grafana" (Grafana-managed rules in its
    provisioning directory) and "prometheus" (Prometheus evaluates alerting rules and sends
    them to an Alertmanager)."""
    paths: set[str] = set()
    services = compose["services"]
    grafana = services.get("grafana", {})
    env = grafana.get("environment") or {}
    root = env.get("GF_PATHS_PROVISIONING", "/etc/grafana/provisioning") if isinstance(env, dict) else ""
    if any(_has_alert_rules(f) for f in _local_files(grafana, f"{root}/alerting")):
        paths.add("grafana")
    prometheus = services.get("prometheus", {})
    flags = [str(a) for a in prometheus.get("command", []) if str(a).startswith("--config.file=")]
    config_path = flags[0].split("=", 1)[1] if flags else "/etc/prometheus/prometheus.yml"
    for config_file in _local_files(prometheus, config_path):
        config = load_yaml(config_file)
        if not (config.get("alerting") or {}).get("alertmanagers"):
            continue
        config_dir = config_path.rsplit("/", 1)[0]
        rule_files = [
            f
            for pattern in config.get("rule_files") or []
            for f in _local_files(
                prometheus, pattern if pattern.startswith("/") else f"{config_dir}/{pattern}"
            )
        ]
        if any(_has_alert_rules(f) for f in rule_files):
            paths.add("prometheus")
    return paths


def test_compose_alerts_through_one_path_prometheus_to_alertmanager() -> None:
    """Compose provisions ONE alert path: Prometheus evaluates the shipped alerts and sends them
    to Alertmanager; Grafana provisions no Grafana-managed copy (both would fire every alert
    twice, with two sets of notifications). Grafana still shows Prometheus's alerts through the
    datasource's manageAlerts. The detector itself recognises the doubled setup compose had."""
    compose = load_yaml(DEPLOY / "docker-compose.yml")
    assert _alert_paths(compose) == {"prometheus"}
    ds = load_yaml(DEPLOY / "grafana" / "provisioning" / "datasources" / "handoffmon.yml")
    (prometheus_ds,) = [d for d in ds["datasources"] if d["type"] == "prometheus"]
    assert prometheus_ds["jsonData"]["manageAlerts"] is True
    # the detector sees Grafana-managed rules however they are mounted, and the documented
    # alternative (Grafana rules, no `alerting:` block in prometheus.yml) is one path again
    doubled = copy.deepcopy(compose)
    doubled["services"]["grafana"]["volumes"].append(
        "./grafana/alerting:/etc/grafana/provisioning/alerting:ro"
    )
    assert _alert_paths(doubled) == {"grafana", "prometheus"}
    whole = copy.deepcopy(compose)
    whole["services"]["grafana"]["volumes"].append(
        {"type": "bind", "source": "./grafana", "target": "/etc/grafana/provisioning"}
    )
    assert "grafana" in _alert_paths(whole)
    file_only = copy.deepcopy(compose)
    file_only["services"]["grafana"]["volumes"].append(
        "./grafana/alerting/handoffmon-alerts.yml:/etc/grafana/provisioning/alerting/a.yml:ro"
    )
    assert "grafana" in _alert_paths(file_only)
    assert not any(
        _has_alert_rules(f)
        for f in _local_files(compose["services"]["prometheus"], "/etc/prometheus/prometheus.yml")
    )


def test_compose_declares_the_v2_requirement_and_ships_alertmanager() -> None:
    """Top-level `name:` needs Compose v2 (v1 rejects it): the file says so; Alertmanager runs the
    shipped config and Prometheus sends to it; host ports are bound to loopback."""
    text = (DEPLOY / "docker-compose.yml").read_text(encoding="utf-8")
    assert "Compose v2" in text
    compose = load_yaml(DEPLOY / "docker-compose.yml")
    assert compose["name"] == "handoffmon"
    am = compose["services"]["alertmanager"]
    assert "./alertmanager/alertmanager.yml:/etc/alertmanager/alertmanager.yml:ro" in am["volumes"]
    targets = load_yaml(PROM_CONFIG)["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert targets == ["alertmanager:9093"]
    for name, svc in compose["services"].items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)


def test_compose_gives_litellm_the_master_key_it_refuses_to_start_without() -> None:
    """LiteLLM 1.108+ refuses to start without a (non-public) master key: compose requires
    LITELLM_MASTER_KEY (`:?` stops `docker compose up` without it), the LiteLLM config reads it,
    LiteLLM's own boot check accepts the result, and the documented request sends it."""
    compose = load_yaml(DEPLOY / "docker-compose.yml")
    env = compose["services"]["litellm"]["environment"]
    assert str(env.get("LITELLM_MASTER_KEY", "")).startswith("${LITELLM_MASTER_KEY:?"), env
    config = load_yaml(DEPLOY / "litellm" / "config.yaml")
    assert config["general_settings"]["master_key"] == "os.environ/LITELLM_MASTER_KEY"
    boot = pytest.importorskip("litellm.proxy.auth.master_key_boot_check")
    key = "sk-0123456789abcdef0123456789abcdef"  # what `sk-$(openssl rand -hex 16)` looks like

    def verdict(master_key: str | None) -> object:
        return boot.master_key_boot_verdict(
            master_key=master_key,
            environment_master_key=master_key,
            general_settings=config["general_settings"],
            config_file_path="config.yaml",
            override_env_is_on=False,
            salt_key_is_set=False,
            database_is_configured=False,
        )

    assert isinstance(verdict(key), boot.SafeMasterKey)
    assert isinstance(verdict(None), boot.UnsafeMasterKeyRefused)  # what an unset key would do
    doc = (ROOT / "docs" / "operations" / "compose.md").read_text(encoding="utf-8")
    assert "export LITELLM_MASTER_KEY=sk-$(openssl rand -hex 16)" in doc
    assert '-H "Authorization: Bearer $LITELLM_MASTER_KEY"' in doc


def test_k8s_grace_period_covers_serve_shutdown(tmp_path: Path) -> None:
    """On SIGTERM serve answers /readyz 503 for proxy.drain_delay_s, lets in-flight requests
    finish (uvicorn's timeout_graceful_shutdown) and drains its check queue
    (pipeline.shutdown_timeout_s): the pod's terminationGracePeriodSeconds must outlast all three,
    or the kubelet's SIGKILL cuts replies and drops the turns still queued."""
    from handoffmon.config import load_config
    from handoffmon.proxy.server import uvicorn_options

    cm = next(d for d in _k8s_docs() if d["kind"] == "ConfigMap")
    path = tmp_path / "handoffmon.yaml"
    path.write_text(cm["data"]["handoffmon.yaml"], encoding="utf-8")
    config = load_config(path, environ={})
    budget = (
        config.proxy.drain_delay_s
        + uvicorn_options(config)["timeout_graceful_shutdown"]
        + config.pipeline.shutdown_timeout_s
    )
    deployment = next(
        d for d in _k8s_docs() if d["kind"] == "Deployment" and d["metadata"]["name"] == "handoffmon"
    )
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace >= budget + 2, (grace, budget)
