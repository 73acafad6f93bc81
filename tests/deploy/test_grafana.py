"""The Grafana dashboard, its provisioning, and the Grafana-managed copy of the alert rules."""

from __future__ import annotations

import re

from tests.deploy.shipped import (
    DASHBOARD,
    DEPLOY,
    GRAFANA_ALERTS,
    RULES,
    alert_names,
    alert_rules,
    dashboard,
    from_rules_tool,
    load_yaml,
    panel_targets,
    panels,
)

PANEL_TOPICS = {
    "adherence by depth": ("Adherence by depth bucket",),
    "pair Δ matrix with significance": ("Δ matrix", "significance"),
    "influence / susceptibility": ("Prefix influence", "Suffix susceptibility"),
    "handoff rate by pair": ("Handoff turns per second by pair",),
    "stationary adherence": ("Stationary adherence",),
    "attribution coverage": ("Attribution coverage",),
    "monitoring health": ("Monitor errors",),
    "fallbacks": ("Router fallbacks", "Fallback share"),
    "store failures": ("store failures",),
    "label cap": ("Label cap",),
    "refit failures and staleness": ("Refit age and failed",),
    "routing decisions and table age": ("Risk-aware routing decisions", "pair-risk table age"),
    "shadow continuation": ("Switch cost (shadow pairs)", "Shadow calls", "Shadow budget"),
}
IDENTITY = ("job", "namespace", "cluster")
SELECTOR = re.compile(r"\b(handoffmon_[a-z0-9_]+)(\{[^}]*\})?")


def test_dashboard_json_is_what_the_sdk_generator_writes() -> None:
    """The checked-in JSON is exactly `python -m deploy.tools.dashboard` (grafana-foundation-sdk)."""
    from deploy.tools import dashboard as generator

    assert DASHBOARD.read_text(encoding="utf-8") == generator.render()


def test_dashboard_has_current_schema_datasource_and_identity_variables() -> None:
    """schemaVersion ≥ 39, a `datasource` variable, single-valued job/namespace/cluster
    variables; every panel and target queries through the datasource variable."""
    dash = dashboard()
    assert dash["schemaVersion"] >= 39
    assert dash["uid"] and dash["title"]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in IDENTITY:
        var = variables[name]
        assert var["type"] == "query" and not var["multi"] and not var["includeAll"], name
        assert var["query"].startswith("label_values(handoffmon_build_info") and var["query"].endswith(
            f", {name})"
        )
    for panel in panels(dash):
        if panel["type"] in ("row", "alertlist"):
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_every_metric_selector_is_scoped_to_one_deployment() -> None:
    """Each handoffmon series a panel or variable reads carries job="$job", namespace="$namespace"
    and cluster="$cluster", so two deployments in one Prometheus never mix on a panel."""
    exprs = [e for _, e in panel_targets(dashboard())]
    exprs += [
        v["query"] for v in dashboard()["templating"]["list"] if v["name"] in ("rule", "model", "fit_rule")
    ]
    unscoped = []
    for expr in exprs:
        for m in SELECTOR.finditer(expr):
            matchers = m.group(2) or ""
            if not all(f'{label}="${label}"' in matchers for label in IDENTITY):
                unscoped.append(f"{m.group(0)} in {expr!r}")
    assert not unscoped, unscoped


def test_dashboard_has_rule_and_model_variables_used_by_the_panels() -> None:
    """`rule` and `model` are multi-select label_values variables and queries filter on them."""
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    for name, metric in (("rule", "handoffmon_checks_total"), ("model", "handoffmon_turns_total")):
        var = variables[name]
        assert var["type"] == "query" and var["multi"] and var["includeAll"]
        assert var["query"].startswith(f"label_values({metric}{{") and var["query"].endswith(f", {name})")
    exprs = [e for _, e in panel_targets(dashboard())]
    assert any('rule=~"$rule"' in e for e in exprs)
    assert any('model=~"$model"' in e for e in exprs)
    assert any('rule="$fit_rule"' in e for e in exprs)


def test_dashboard_covers_every_required_view() -> None:
    """The views the issue asks for each have a panel, and the metrics nobody watched before
    (fallbacks, history tokens, checker time, proxy requests/upstream errors, store failures,
    label caps, refit failures) are queried."""
    titles = [p["title"] for p in panels(dashboard())]
    for topic, needles in PANEL_TOPICS.items():
        for needle in needles:
            assert any(needle.lower() in t.lower() for t in titles), (topic, needle)
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
        "handoffmon_responses_without_reply_total",
        "handoffmon_overhead_seconds_bucket",
        "handoffmon_refit_last_success_timestamp_seconds",
        "handoffmon_fallbacks_total",
        "handoffmon_history_tokens_bucket",
        "handoffmon_check_seconds_total",
        "handoffmon_proxy_requests_total",
        "handoffmon_proxy_upstream_errors_total",
        "handoffmon_proxy_queued_bytes",
        "handoffmon_proxy_queued_bytes_limit",
        "handoffmon_store_failures_total",
        "handoffmon_store_operations_total",
        "handoffmon_store_evictions_total",
        "handoffmon_label_values",
        "handoffmon_label_limit",
        "handoffmon_routing_decisions_total",
        "handoffmon_routing_table_timestamp_seconds",
        "handoffmon_switch_cost",
        "handoffmon_shadow_pair_stats_total",
        "handoffmon_shadow_calls_total",
        "handoffmon_shadow_skipped_total",
        "handoffmon_shadow_budget_used",
        "handoffmon_shadow_spend_usd_total",
        "handoffmon_shadow_breaker_open",
    ):
        assert metric in exprs, metric
    assert "requested_model" in exprs


def test_alertlist_panel_lists_handoffmon_alerts_only() -> None:
    """The alert list filters by the names of the shipped alerts (all of them, nothing else)."""
    (panel,) = [p for p in panels(dashboard()) if p["type"] == "alertlist"]
    label_filter = panel["options"]["alertInstanceLabelFilter"]
    m = re.fullmatch(r'\{alertname=~"([^"]+)"\}', label_filter)
    assert m, label_filter
    assert sorted(m.group(1).split("|")) == sorted(alert_names())


def test_panel_ids_are_unique_and_panels_fit_the_grid_without_overlap() -> None:
    """Grafana needs unique panel ids; gridPos must lie within the 24-column grid and no two
    panels may cover the same cell (Grafana would shove them around)."""
    all_panels = dashboard()["panels"]
    ids = [p["id"] for p in all_panels]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], str] = {}
    for p in all_panels:
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


# The keys Grafana's alerting file provisioning reads (yaml tags of AlertingFileV1,
# AlertRuleGroupV1, AlertRuleV1 and QueryV1 in grafana/grafana
# pkg/services/provisioning/alerting/{types,rules_types}.go). Grafana unmarshals the file
# without strict mode, so a key it does not know (``keep_firing_for``, ``keepFiring``) is
# dropped without an error or a log line: only this list can catch a misspelt one.
# ``keepFiringFor`` is read from Grafana 12.1.2 on (grafana/grafana#109699); 11.x ignores it.
GRAFANA_FILE_KEYS = {
    "apiVersion",
    "groups",
    "deleteRules",
    "contactPoints",
    "deleteContactPoints",
    "policies",
    "resetPolicies",
}
GRAFANA_GROUP_KEYS = {"orgId", "name", "folder", "interval", "rules"}
GRAFANA_RULE_KEYS = {
    "uid",
    "title",
    "condition",
    "data",
    "dashboardUid",
    "panelId",
    "noDataState",
    "execErrState",
    "for",
    "keepFiringFor",
    "missing_series_evals_to_resolve",
    "annotations",
    "labels",
    "isPaused",
    "notification_settings",
    "record",
}
GRAFANA_QUERY_KEYS = {"refId", "queryType", "relativeTimeRange", "datasourceUid", "model"}
PROMETHEUS_DURATION = re.compile(r"^0$|^(?=\d)(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?$")
"""prometheus/common model.ParseDuration, which Grafana parses for/keepFiringFor/interval with."""


def test_grafana_alert_file_uses_only_keys_grafana_provisioning_reads() -> None:
    """Every key of the Grafana copy is one Grafana's file provisioning reads (it drops unknown
    keys silently), and its durations parse as Prometheus durations: a misspelt
    ``keepFiringFor`` would leave the refit alerts flapping at a switch of the standing fit
    with nothing said."""
    alerting = load_yaml(GRAFANA_ALERTS)
    assert set(alerting) <= GRAFANA_FILE_KEYS
    for group in alerting["groups"]:
        assert set(group) <= GRAFANA_GROUP_KEYS, set(group) - GRAFANA_GROUP_KEYS
        assert PROMETHEUS_DURATION.match(group["interval"]), group["interval"]
        for rule in group["rules"]:
            assert set(rule) <= GRAFANA_RULE_KEYS, (rule["title"], set(rule) - GRAFANA_RULE_KEYS)
            for key in ("for", "keepFiringFor"):
                if key in rule:
                    assert PROMETHEUS_DURATION.match(rule[key]), (rule["title"], key, rule[key])
            for query in rule["data"]:
                assert set(query) <= GRAFANA_QUERY_KEYS, (rule["title"], set(query) - GRAFANA_QUERY_KEYS)
                assert set(query.get("relativeTimeRange", {})) <= {"from", "to"}, rule["title"]


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


def _outer_by(expr: str) -> str:
    """The label list of the expression's first ``by (...)``: what one row of its table holds."""
    m = re.search(r"\bby \(([^)]*)\)", expr)
    assert m, expr
    return m.group(1)


def test_every_table_shows_all_its_series_in_one_frame() -> None:
    """A Prometheus query in the default time-series format gives Grafana one frame per series,
    and a table panel shows one frame at a time (a frame selector under the table): the pair
    table would show one pair's Δ, and its interval, significance and risk queries would sit
    behind the selector. Every table query is an instant query in "table" format (one frame
    per query, labels as columns); a table of several queries merges them into one row per
    label set (all aggregate by the same labels) and names every value column (Grafana calls
    them "Value #<refId>")."""
    tables = [p for p in panels(dashboard()) if p["type"] == "table"]
    assert len(tables) >= 6
    for panel in tables:
        targets = panel["targets"]
        assert all(t.get("format") == "table" and t.get("instant") for t in targets), panel["title"]
        steps = [t["id"] for t in panel.get("transformations", [])]
        if len(targets) > 1:
            assert steps[:1] == ["merge"], panel["title"]
            assert len({_outer_by(t["expr"]) for t in targets}) == 1, panel["title"]
            value_columns = {f"Value #{t['refId']}" for t in targets}
        else:
            value_columns = {"Value"}
        if "groupingToMatrix" in steps:
            continue
        (organize,) = [t for t in panel["transformations"] if t["id"] == "organize"]
        renames = organize["options"]["renameByName"]
        assert set(renames) == value_columns, panel["title"]
        assert all(renames.values()) and len(set(renames.values())) == len(renames), panel["title"]
        assert organize["options"]["excludeByName"] == {"Time": True}, panel["title"]


def test_delta_matrix_pivots_prefix_models_into_rows_and_models_into_columns() -> None:
    """The "Δ matrix" is a matrix, as its title says: Grafana's groupingToMatrix transformation
    turns the (prefix_model, model, Value) rows into a row per prefix model and a column per
    model, over labels the query keeps."""
    (panel,) = [p for p in panels(dashboard()) if "Δ matrix" in p["title"]]
    (target,) = panel["targets"]
    assert _outer_by(target["expr"]) == "prefix_model, model"
    (pivot,) = [t for t in panel["transformations"] if t["id"] == "groupingToMatrix"]
    assert pivot["options"] == {"rowField": "prefix_model", "columnField": "model", "valueField": "Value"}


def _unit(panel: dict, ref: str) -> str | None:  # type: ignore[type-arg]
    """The unit Grafana shows query ``ref``'s values in: a byFrameRefID override, else the panel's."""
    config = panel.get("fieldConfig", {})
    for override in config.get("overrides", []):
        if override["matcher"] == {"id": "byFrameRefID", "options": ref}:
            for prop in override["properties"]:
                if prop["id"] == "unit":
                    return str(prop["value"])
    unit = config.get("defaults", {}).get("unit")
    return None if unit is None else str(unit)


def test_every_query_is_shown_in_the_unit_of_its_quantity() -> None:
    """A panel's unit applies to all its queries unless an override says otherwise, so a panel
    mixing quantities needs overrides: an age (`time() - timestamp`) in seconds, money in a
    currency, and counts of events (increase/rate of a counter, not a ratio) or 0/1 flags never
    in seconds, percent or bytes (a shadow spend of 12 USD/day would read "1200%", one failed
    refit "1 s")."""
    not_a_count = {"s", "ms", "percentunit", "percent", "bytes", "currencyUSD"}
    wrong: list[str] = []
    checked = 0
    for panel in panels(dashboard()):
        for target in panel.get("targets", []):
            expr, unit = target["expr"], _unit(panel, target["refId"])
            where = f"{panel['title']} [{target['refId']}]: {unit}"
            if expr.startswith("time() -"):
                checked += 1
                if unit != "s":
                    wrong.append(where)
            elif "_usd_" in expr:
                checked += 1
                if not (unit or "").startswith("currency"):
                    wrong.append(where)
            elif "/" not in expr and re.search(
                r"\b(increase|rate)\(handoffmon_[a-z_]+(?<!_seconds)_total\{|_breaker_open\{|_verdict_routing\{",
                expr,
            ):
                checked += 1
                if unit in not_a_count:
                    wrong.append(where)
    assert checked >= 15
    assert not wrong, wrong
