"""Paths of the shipped deploy files and small loaders shared by the deploy tests."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "handoffmon-rules.yml"
RULES_TEST = DEPLOY / "prometheus" / "handoffmon-rules.test.yml"
PROM_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "handoffmon.json"
GRAFANA_ALERTS = DEPLOY / "grafana" / "alerting" / "handoffmon-alerts.yml"
ALERTMANAGER_CONFIG = DEPLOY / "alertmanager" / "alertmanager.yml"
ALERTING_DOC = ROOT / "docs" / "operations" / "alerting.md"

ROUTING_ONLY = ("handoffmon_routing_",)
"""Series exported only with ``routing.enabled`` (off in the demo): their panels must parse
and run on demo data but may be empty; ``test_e2e_routing`` checks them on a runtime with routing
on."""


SHADOW_ONLY = ("handoffmon_shadow_", "handoffmon_switch_cost")
"""Series exported only with ``shadow.enabled`` (off in the demo): their panels must parse
and run on demo data but may be empty; ``test_e2e_shadow`` checks them on a runtime with shadow
continuation on."""


def from_rules_tool() -> ModuleType:
    """deploy/tools/from_rules.py (``deploy`` is a package of the repository, not installed)."""
    from deploy.tools import from_rules

    return from_rules


def load_yaml(path: Path) -> Any:
    """One YAML document."""
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def alert_rules() -> list[dict[str, Any]]:
    """The alerting rules of the shipped rules file, in file order."""
    return [r for g in load_yaml(RULES)["groups"] for r in g["rules"] if "alert" in r]


def dashboard() -> dict[str, Any]:
    """The shipped Grafana dashboard."""
    data: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, rows' nested panels included."""
    return [p for panel in dash["panels"] for p in [panel, *panel.get("panels", [])]]


def panel_targets(dash: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expr) of every query target, rows' nested panels included."""
    out: list[tuple[str, str]] = []
    for panel in dash["panels"]:
        for p in [panel, *panel.get("panels", [])]:
            out.extend((p["title"], t["expr"]) for t in p.get("targets", []) if t.get("expr"))
    return out


# What a Grafana user would get with every variable at its default / "All", looking at the
# deployment job="prod" (a target with no namespace/cluster label: those variables are empty).
TEMPLATE_VALUES = {
    "job": "prod",
    "namespace": "",
    "cluster": "",
    "rule": ".*",
    "model": ".*",
    "fit_rule": "all",
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "10m",
}


def substitute(expr: str, values: dict[str, str] = TEMPLATE_VALUES) -> str:
    """Replace Grafana template variables ($name and ${name}) as Grafana would."""

    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return values.get(name, m.group(0))

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", repl, expr)


def alert_names() -> list[str]:
    """Names of the shipped alerts, in file order."""
    return [str(a["alert"]) for a in alert_rules()]
