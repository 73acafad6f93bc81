"""The Grafana dashboard, its provisioning, and the Grafana-managed copy of the alert rules."""

from __future__ import annotations

from tests.deploy.shipped import (
    DEPLOY,
    GRAFANA_ALERTS,
    RULES,
    alert_rules,
    dashboard,
    from_rules_tool,
    load_yaml,
    panel_targets,
)

PANEL_TOPICS = {
    "adherence by depth": ("Adherence by depth bucket",),
    "pair Δ matrix with significance": ("Δ matrix", "significance"),
    "influence / susceptibility": ("Prefix influence", "Suffix susceptibility"),
    "handoff rate by pair": ("Handoff turns per second by pair",),
    "stationary adherence": ("Stationary adherence",),
    "attribution coverage": ("Attribution coverage",),
    "monitoring health": ("Monitor errors",),
}


def test_dashboard_has_current_schema_and_a_datasource_variable() -> None:
    """schemaVersion ≥ 39, a `datasource` variable of type datasource, and every panel and
    target querying through it (no hard-coded datasource uid)."""
    dash = dashboard()
    assert dash["schemaVersion"] >= 39
    assert dash["uid"] and dash["title"]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in dash["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_dashboard_has_rule_and_model_variables_used_by_the_panels() -> None:
    """`rule` and `model` are multi-select label_values variables and queries filter on them."""
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    for name, metric in (("rule", "handoffmon_checks_total"), ("model", "handoffmon_turns_total")):
        var = variables[name]
        assert var["type"] == "query" and var["multi"] and var["includeAll"]
        assert var["definition"] == f"label_values({metric}, {name})"
    exprs = [e for _, e in panel_targets(dashboard())]
    assert any('rule=~"$rule"' in e for e in exprs)
    assert any('model=~"$model"' in e for e in exprs)
    assert any('rule="$fit_rule"' in e for e in exprs)


def test_dashboard_covers_every_required_view() -> None:
    """Adherence by depth, the Δ matrix with significance, π/σ, handoff rate by pair,
    stationary adherence, attribution coverage and monitoring health each have a panel."""
    titles = [p["title"] for p in dashboard()["panels"]]
    for topic, needles in PANEL_TOPICS.items():
        for needle in needles:
            assert any(needle in t for t in titles), (topic, needle)
    exprs = " ".join(e for _, e in panel_targets(dashboard()))
    for metric in (
        "handoffmon_handoff_delta",
        "handoffmon_handoff_significant",
        "handoffmon_handoff_risk",
        "handoffmon_prefix_influence",
        "handoffmon_suffix_susceptibility",
        "handoffmon_stationary_adherence",
        "handoffmon_attributions_total",
        "handoffmon_monitor_errors_total",
        "handoffmon_queue_dropped_total",
        "handoffmon_overhead_seconds_bucket",
        "handoffmon_refit_last_success_timestamp_seconds",
    ):
        assert metric in exprs, metric


def test_panel_ids_are_unique_and_panels_fit_the_grid_without_overlap() -> None:
    """Grafana needs unique panel ids; gridPos must lie within the 24-column grid and no two
    panels may cover the same cell (Grafana would shove them around)."""
    panels = dashboard()["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], str] = {}
    for p in panels:
        pos = p["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24 and pos["h"] > 0, p["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, (p["title"], cells.get((x, y)))
                cells[(x, y)] = p["title"]


def test_provisioning_points_at_the_dashboard_and_the_alerting_datasource_uid() -> None:
    """The datasource provisioning defines the uid the Grafana alert rules query; the
    dashboards provider loads a file path (where compose mounts the JSON)."""
    ds = load_yaml(DEPLOY / "grafana" / "provisioning" / "datasources" / "handoffmon.yml")
    assert ds["apiVersion"] == 1
    uids = {d["uid"] for d in ds["datasources"] if d["type"] == "prometheus"}
    dashboards = load_yaml(DEPLOY / "grafana" / "provisioning" / "dashboards" / "handoffmon.yml")
    provider = dashboards["providers"][0]
    assert provider["type"] == "file"
    compose = load_yaml(DEPLOY / "docker-compose.yml")
    mounts = compose["services"]["grafana"]["volumes"]
    assert f"./grafana/dashboards:{provider['options']['path']}:ro" in mounts
    alerting = load_yaml(GRAFANA_ALERTS)
    for rule in alerting["groups"][0]["rules"]:
        assert rule["data"][0]["datasourceUid"] in uids


def test_grafana_alert_rules_carry_the_same_alerts_as_prometheus() -> None:
    """One Grafana rule per Prometheus alert with the identical PromQL, `for`, labels and
    runbook; the condition fires for every series the query returns."""
    alerting = load_yaml(GRAFANA_ALERTS)
    assert alerting["apiVersion"] == 1
    group = alerting["groups"][0]
    assert group["folder"] and group["interval"]
    by_title = {r["title"]: r for r in group["rules"]}
    prom = {a["alert"]: a for a in alert_rules()}
    assert set(by_title) == set(prom)
    for name, alert in prom.items():
        rule = by_title[name]
        refs = {d["refId"]: d for d in rule["data"]}
        assert refs["A"]["model"]["expr"] == alert["expr"].strip()
        assert refs["C"]["model"]["expression"] == "is_number($B)"
        assert rule["condition"] == "C"
        assert rule["for"] == alert["for"]
        assert rule["labels"] == alert["labels"]
        assert rule["annotations"]["runbook_url"] == alert["annotations"]["runbook_url"]
        assert "$value " not in rule["annotations"]["description"]
        assert len(rule["uid"]) <= 40


def test_grafana_alert_file_is_what_the_generator_writes() -> None:
    """The committed provisioning file is in sync with deploy/tools/from_rules.py."""
    assert GRAFANA_ALERTS.read_text(encoding="utf-8") == from_rules_tool().render_grafana(RULES)


def test_generator_translates_value_templates_for_grafana() -> None:
    """Prometheus' `$value` becomes Grafana's `$values.B.Value`; `$labels` stays."""
    rule = from_rules_tool().grafana_rule(
        {
            "alert": "X",
            "expr": "up == 0",
            "for": "5m",
            "labels": {"severity": "info"},
            "annotations": {"summary": "{{ $labels.job }} at {{ $value | humanize }}"},
        }
    )
    assert rule["annotations"]["summary"] == "{{ $labels.job }} at {{ $values.B.Value | humanize }}"
    assert rule["uid"] == "handoffmon-x"
