"""End to end on a real Prometheus: the shipped rules and every dashboard query, on recorded
demo traffic of two deployments (``tests/deploy/conftest.py``), kept apart by ``job``.

Every panel query, with ``$job="prod"``, must parse, return data (except the panels for
series the demo's wrap mode does not export) and equal the same query on a reference
Prometheus that scrapes ``prod`` alone: a query that summed the two deployments would differ.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any

import pytest

from tests.deploy.conftest import ReplayStack
from tests.deploy.shipped import (
    GRAFANA_ALERTS,
    ROUTING_ONLY,
    RULES,
    SHADOW_ONLY,
    TEMPLATE_VALUES,
    dashboard,
    load_yaml,
    panel_targets,
    substitute,
)
from tests.promserver import PromServer

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]  # replay stack: 30-50 s

SERVE_ONLY = (
    "handoffmon_proxy_",
    "handoffmon_store_failures_total",
    "handoffmon_store_evictions_total",
    "handoffmon:proxy_",
)
"""Series the recorded demo snapshots lack or hold only at zero: `handoffmon serve`'s own (the
demo has no proxy), the store's failures and evictions (none on demo traffic, so their
rates and increases are 0 and the `> 0` filters empty). Their panels and records must parse
and run, but may be empty on demo data. (The snapshots hold every family the code exports:
tests/deploy/test_snapshots.py.)"""
READY_TIMEOUT_S = 60.0
REL_TOL = 0.05
SETTLE_S = 40.0
"""Seconds of replayed traffic before the comparisons: a [5m] rate then differs by at most
1/40 = 2.5% between two servers whose last evaluation is a 1 s interval apart (< REL_TOL)."""
VALUES = {**TEMPLATE_VALUES, "__rate_interval": "20s"}
"""A $__rate_interval of 20 scrape intervals (Grafana uses at least 4): with windows that
both servers have filled, rates of the linearly replayed counters agree exactly."""


def _serve_only(expr: str) -> bool:
    return any(s in expr for s in (*SERVE_ONLY, *ROUTING_ONLY, *SHADOW_ONLY))


TWO_MODEL_UNDEFINED = ("handoffmon_refit_r2",)
"""Gauges the refit leaves out for the recorded two-model fleets: adjusted R² has no degrees of
freedom with two pairs and three parameters (the live six-model demo test checks they have data)."""


def _undefined_for_two_models(expr: str) -> bool:
    return any(s in expr for s in TWO_MODEL_UNDEFINED)


def _by_labels(result: list[dict[str, Any]]) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s["metric"].items())): float(s["value"][1]) for s in result}


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-9)


@pytest.fixture(scope="module")
def ready(replay_stack: ReplayStack) -> ReplayStack:
    """Both servers have a few seconds of both deployments and the refit gauges."""

    def has_data(prom: PromServer) -> bool:
        return bool(
            prom.query('sum by (job) (increase(handoffmon_turns_total{job="prod"}[1h])) > 50')
        ) and bool(prom.query("handoffmon_handoff_risk"))

    for prom in (replay_stack.prom, replay_stack.reference):
        assert prom.wait_for(lambda p=prom: has_data(p), READY_TIMEOUT_S), prom.log_tail()
    # rates over windows longer than the traffic so far grow with time; both servers' last scrape
    # and rule evaluation may lag by up to one 1 s interval, i.e. a relative 1/T: wait for T ≥ 40 s
    time.sleep(max(0.0, replay_stack.started_at + SETTLE_S - time.time()))
    return replay_stack


def test_every_rule_evaluates_without_error_and_recording_rules_keep_deployments_apart(
    ready: ReplayStack,
) -> None:
    """All shipped rules are healthy on real series; each recording rule has samples for each
    deployment (carrying its job label), except those over serve-only series."""
    prom = ready.prom
    assert prom.wait_for(lambda: all(h == "ok" for _, h, _ in prom.rule_health()), 15.0), prom.rule_health()
    records = [r for g in load_yaml(RULES)["groups"] for r in g["rules"] if "record" in r]
    missing = []

    def jobs(record: str) -> set[str]:
        return {s["metric"].get("job", "") for s in prom.query(record)}

    for rule in records:
        if _serve_only(rule["expr"]):
            prom.query(rule["record"])
            continue
        if not prom.wait_for(lambda r=rule["record"]: jobs(r) == {"prod", "staging"}, 20.0):
            missing.append(f"{rule['record']}: {sorted(jobs(rule['record']))}")
    assert not missing, "recording rules without both deployments:\n" + "\n".join(missing)


def test_every_dashboard_query_returns_data_for_one_deployment_only(ready: ReplayStack) -> None:
    """Each panel target with `$job=prod` parses, returns data (serve-only panels excepted)
    and matches the reference Prometheus that never saw staging; with `$job=staging` at least
    half the panels with data differ (the two recorded deployments are not alike; the serve-only
    panels, empty for both, cannot)."""
    targets = panel_targets(dashboard())
    assert len(targets) >= 30
    problems: list[str] = []
    differs = compared = 0
    for title, expr in targets:
        prod = substitute(expr, VALUES)
        staging = substitute(expr, {**VALUES, "job": "staging"})
        at = time.time() - 2.0  # one evaluation instant, which both servers have scraped past
        shared = _by_labels(ready.prom.query(prod, at))  # raises with Prometheus' parse error
        reference = _by_labels(ready.reference.query(prod, at))
        if not shared and not _serve_only(expr) and not _undefined_for_two_models(expr):
            problems.append(f"no data: {title}: {prod}")
        if set(shared) != set(reference) or not all(_close(shared[k], reference[k]) for k in shared):
            # rates of a scrape taken a moment apart: retry once before calling it a leak
            at = time.time() - 2.0
            shared = _by_labels(ready.prom.query(prod, at))
            reference = _by_labels(ready.reference.query(prod, at))
            if set(shared) != set(reference) or not all(_close(shared[k], reference[k]) for k in shared):
                problems.append(
                    f"differs from prod alone: {title}\n  shared={shared}\n  reference={reference}"
                )
        if not _serve_only(expr):
            compared += 1
            differs += _by_labels(ready.prom.query(staging)) != shared
    assert not problems, "\n".join(problems)
    assert compared >= 30
    assert differs >= compared // 2, f"staging looks like prod on {compared - differs} of {compared} queries"


def test_dashboard_variables_resolve_to_label_values(ready: ReplayStack) -> None:
    """The identity variables list both deployments; rule, model and fit_rule return values for
    job=prod, and the fit_rule default (`all`) is among them."""
    prom = ready.prom
    for var in dashboard()["templating"]["list"]:
        if var["type"] != "query":
            continue
        m = re.fullmatch(r"label_values\((.+), (\w+)\)", var["query"])
        assert m, var["query"]
        values = prom.api(f"label/{m.group(2)}/values", {"match[]": substitute(m.group(1))})
        if var["name"] == "job":
            assert set(values) >= {"prod", "staging"}
        elif var["name"] in ("namespace", "cluster"):
            assert values == [], "plain targets carry no namespace/cluster label"
        else:
            assert values, var["name"]
        if var["name"] == "fit_rule":
            assert var["current"]["value"] in values


def test_grafana_alert_queries_run_and_select_the_planted_pair_in_prod_only(ready: ReplayStack) -> None:
    """Every Grafana-managed rule's query A runs; HandoffPairRisky's returns the planted pair
    for job=prod and nothing for the healthy staging deployment."""
    prom = ready.prom
    rules = load_yaml(GRAFANA_ALERTS)["groups"][0]["rules"]
    queries = {r["title"]: next(d for d in r["data"] if d["refId"] == "A")["model"]["expr"] for r in rules}
    for expr in queries.values():
        prom.query(expr)  # raises on a parse or evaluation error

    def selected() -> set[tuple[str, str, str]]:
        return {
            (s["metric"]["job"], s["metric"]["prefix_model"], s["metric"]["model"])
            for s in prom.query(queries["HandoffPairRisky"])
        }

    assert prom.wait_for(lambda: bool(selected()), READY_TIMEOUT_S)
    assert selected() == {("prod", "atlas", "birch")}
