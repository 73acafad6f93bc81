"""Verdict routing reaches the refit gauges of both exporters: the handoff-after-fail ratio with
its bounds and the flag, per rule and for the pooled rule="all", absent where the refit has none.

The alerts hold the Δ-based handoff alerts of a rule whose fresh refit has
``handoffmon_verdict_routing == 1`` (deploy/prometheus/handoffmon-rules.yml), so the flag
must be 1 exactly for flagged fits and 0 (not absent) for fits the check cleared.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, generate_latest

from handoffmon.exporters.otel import OTelExporter
from handoffmon.exporters.prometheus import PrometheusExporter
from handoffmon.exporters.refit_series import REFIT_GAUGES
from handoffmon.refit.result import RefitResult, SwitchCost
from tests.exporters.refits import NAN, make_refit
from tests.exporters.turns import LF, only, parse_exposition

RATIO = "handoffmon_handoff_after_fail_ratio"
FLAG = "handoffmon_verdict_routing"


def _refit() -> RefitResult:
    """Rule ``json``: handoffs follow failures (3.75 [3.51, 4.01], flagged); pooled ``all``: blind
    routing (0.995 [0.88, 1.13], not flagged); rule ``tone``: no transitions (NaN). A shadow
    switch cost on ``json`` fills every other gauge."""
    base = make_refit()
    fits = dict(base.rules)
    shadow = SwitchCost("json", "gpt", "claude", 120, -0.08, -0.14, -0.02, True, disagree=True)
    fits["json"] = dataclasses.replace(
        fits["json"],
        handoff_after_fail_ratio=3.75,
        handoff_after_fail_ci=(3.51, 4.01),
        verdict_routing=True,
        switch_costs=[shadow],
    )
    fits["all"] = dataclasses.replace(
        fits["all"], handoff_after_fail_ratio=0.995, handoff_after_fail_ci=(0.88, 1.13), verdict_routing=False
    )
    fits["tone"] = dataclasses.replace(
        fits["json"],
        rule="tone",
        handoff_after_fail_ratio=NAN,
        handoff_after_fail_ci=(NAN, NAN),
        verdict_routing=False,
    )
    return dataclasses.replace(base, rules=fits)


EXPECTED_RATIO = {
    ("json", "estimate"): 3.75,
    ("json", "lower"): 3.51,
    ("json", "upper"): 4.01,
    ("all", "estimate"): 0.995,
    ("all", "lower"): 0.88,
    ("all", "upper"): 1.13,
}
EXPECTED_FLAG = {("json",): 1.0, ("all",): 0.0}


def _prometheus(result: RefitResult) -> dict[str, Any]:
    exp = PrometheusExporter(CollectorRegistry(), multiprocess=False)
    assert exp.publish_refit(result)
    return parse_exposition(generate_latest(exp.registry).decode())


def _otel(result: RefitResult) -> dict[str, dict[tuple[tuple[str, Any], ...], float]]:
    reader = InMemoryMetricReader()
    exp = OTelExporter(meter_provider=MeterProvider(metric_readers=[reader]))
    assert exp.publish_refit(result)
    out: dict[str, dict[tuple[tuple[str, Any], ...], float]] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    out.setdefault(m.name, {})[tuple(sorted(p.attributes.items()))] = p.value
    return out


def test_prometheus_publishes_ratio_bounds_and_flag_per_rule() -> None:
    """json flagged → 1 with its three bounds, all cleared → 0, tone without data → absent."""
    s = _prometheus(_refit())
    assert only(s, RATIO) == {LF(rule=r, bound=b): pytest.approx(v) for (r, b), v in EXPECTED_RATIO.items()}
    assert only(s, FLAG) == {LF(rule=r): v for (r,), v in EXPECTED_FLAG.items()}


def test_otel_publishes_the_same_values() -> None:
    """The OTel observable gauges carry the same series as the Prometheus gauges."""
    got = _otel(_refit())
    assert got[RATIO] == {
        (("bound", b), ("fit", "local"), ("rule", r)): pytest.approx(v)
        for (r, b), v in EXPECTED_RATIO.items()
    }
    assert got[FLAG] == {(("fit", "local"), ("rule", r)): v for (r,), v in EXPECTED_FLAG.items()}


def test_an_unflagged_fit_without_the_check_publishes_no_ratio() -> None:
    """The helper's default refit (no transitions behind the check: NaN) exports neither gauge,
    so an alert holding on verdict_routing == 1 cannot be held by a missing check."""
    base = make_refit()
    assert all(math.isnan(f.handoff_after_fail_ratio) for f in base.rules.values())
    s = _prometheus(base)
    assert RATIO not in s or not only(s, RATIO)
    assert FLAG not in s or not only(s, FLAG)


def test_both_exporters_publish_every_refit_gauge() -> None:
    """Every REFIT_GAUGES entry is a metric family in both exporters after a refit."""
    prom = _prometheus(_refit())
    otel = _otel(_refit())
    names = {spec.name for spec in REFIT_GAUGES}
    assert {RATIO, FLAG} <= names
    assert names - {name for name, _ in prom} == set()
    assert names - set(otel) == set()


def test_handoffs_only_after_failures_keep_flag_and_lower_bound_in_both_exporters() -> None:
    """No handoff ever followed a passed check: the ratio is +Inf. Prometheus exports +Inf; the
    OTel SDK drops non-finite observations, so there the estimate is absent, but the flag and
    the finite lower bound the alert falls back on are published by both."""
    base = make_refit()
    fits = dict(base.rules)
    fits["json"] = dataclasses.replace(
        fits["json"],
        handoff_after_fail_ratio=math.inf,
        handoff_after_fail_ci=(2.0, math.inf),
        verdict_routing=True,
    )
    result = dataclasses.replace(base, rules=fits)
    s = _prometheus(result)
    assert only(s, RATIO) == {
        LF(rule="json", bound="estimate"): math.inf,
        LF(rule="json", bound="lower"): 2.0,
        LF(rule="json", bound="upper"): math.inf,
    }
    assert only(s, FLAG) == {LF(rule="json"): 1.0}
    got = _otel(result)
    assert got[RATIO] == {(("bound", "lower"), ("fit", "local"), ("rule", "json")): 2.0}
    assert got[FLAG] == {(("fit", "local"), ("rule", "json")): 1.0}
