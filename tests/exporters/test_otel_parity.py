"""The OpenTelemetry instruments carry the same series as the Prometheus counters for the same turns."""

from __future__ import annotations

import logging
import math

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry

from handoffmon.exporters.otel import OTelExporter
from handoffmon.exporters.prometheus import PrometheusExporter
from handoffmon.labels import LabelGuard
from tests.exporters.turns import make_result, scripted_conversation

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _turns() -> list:  # type: ignore[type-arg]
    return [
        *scripted_conversation(),
        make_result(
            conversation_id="c9",
            depth=2,
            author="claude",
            prefix_model="gpt",
            fallbacks=2,
            requested_model="big-group",
            methods=["response_id", "chain", "content"],
            checks=[("json", "pass")],
        ),
    ]


def _prometheus(registry: CollectorRegistry) -> Series:
    out: Series = {}
    for family in registry.collect():
        if family.type != "counter" or not family.name.startswith("handoffmon_"):
            continue
        for s in family.samples:
            if s.name.endswith("_total"):
                out[(family.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _otel(reader: InMemoryMetricReader) -> Series:
    out: Series = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if not getattr(metric.data, "is_monotonic", False):
                    continue
                for p in metric.data.data_points:
                    labels = tuple(sorted((k, str(v)) for k, v in (p.attributes or {}).items()))
                    out[(metric.name, labels)] = p.value
    return out


def test_fallbacks_and_attributions_match_prometheus() -> None:
    """Every per-turn counter series (fallbacks with requested_model, attributions by
    method including response_id, turns, checks, ...) has the same labels and value in both,
    the series Prometheus starts at 0 (every verdict of a cell, every stage's errors) too."""
    reader = InMemoryMetricReader()
    otel = OTelExporter(meter_provider=MeterProvider(metric_readers=[reader]), guard=LabelGuard())
    prom = PrometheusExporter(CollectorRegistry(), guard=LabelGuard())
    for result in _turns():
        assert otel.export(result) and prom.export(result)
    p, o = _prometheus(prom.registry), _otel(reader)
    per_turn = {name for name, _ in o} - {"handoffmon_label_overflows", "handoffmon_store_failures"}
    assert {"handoffmon_fallbacks", "handoffmon_attributions", "handoffmon_turns"} <= per_turn
    for name in per_turn:
        assert {k: v for k, v in o.items() if k[0] == name} == {k: v for k, v in p.items() if k[0] == name}, (
            name
        )
    assert o[("handoffmon_fallbacks", (("model", "claude"), ("requested_model", "big-group")))] == 2
    assert o[("handoffmon_attributions", (("method", "response_id"),))] == 1


def _families(reader: InMemoryMetricReader) -> dict[str, dict[tuple[tuple[str, str], ...], object]]:
    out: dict[str, dict[tuple[tuple[str, str], ...], object]] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                points = out.setdefault(metric.name, {})
                for p in metric.data.data_points:
                    points[tuple(sorted((k, str(v)) for k, v in (p.attributes or {}).items()))] = p
    return out


def test_history_tokens_label_usage_and_build_info_are_instruments_too() -> None:
    """The rows metrics.md lists for every monitor exist in OTel with Prometheus' values:
    the history-token histogram, the cap gauges and build info."""
    reader, guard = InMemoryMetricReader(), LabelGuard(max_models=3)  # shared, as the runtime does
    otel = OTelExporter(meter_provider=MeterProvider(metric_readers=[reader]), guard=guard)
    prom = PrometheusExporter(CollectorRegistry(), guard=guard)
    for result in _turns():
        assert otel.export(result) and prom.export(result)
    o, reg = _families(reader), prom.registry
    hist = o["handoffmon_history_tokens"]
    for (_, bucket), point in ((k[0], p) for k, p in hist.items()):
        labels = {"depth_bucket": bucket}
        assert point.count == reg.get_sample_value("handoffmon_history_tokens_count", labels)  # type: ignore[attr-defined]
        assert point.sum == reg.get_sample_value("handoffmon_history_tokens_sum", labels)  # type: ignore[attr-defined]
    assert len(hist) >= 3
    for name in ("handoffmon_label_values", "handoffmon_label_limit"):
        assert {k: p.value for k, p in o[name].items()} == {  # type: ignore[attr-defined]
            (("label", label),): reg.get_sample_value(name, {"label": label})
            for label in ("model", "requested_model", "rule", "stage")
        }, name
    assert o["handoffmon_label_values"][(("label", "model"),)].value == 3  # type: ignore[attr-defined]
    (info,) = o["handoffmon_build_info"].items()
    assert info[1].value == 1 and reg.get_sample_value("handoffmon_build_info", dict(info[0])) == 1  # type: ignore[attr-defined]


def _prometheus_points(registry: CollectorRegistry) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Family → labels → value: counters' ``_total``, gauges, histograms' ``_count`` (and
    ``_sum`` under the name ``<family>:sum``), for every family with samples."""
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in registry.collect():
        for s in family.samples:
            key = tuple(sorted(s.labels.items()))
            if (family.type == "counter" and s.name == f"{family.name}_total") or family.type == "gauge":
                out.setdefault(family.name, {})[key] = s.value
            elif family.type == "histogram" and s.name in (f"{family.name}_count", f"{family.name}_sum"):
                name = family.name if s.name.endswith("_count") else f"{family.name}:sum"
                out.setdefault(name, {})[key] = s.value
    return out


def _otel_points(reader: InMemoryMetricReader) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for name, points in _families(reader).items():
        for key, p in points.items():
            if hasattr(p, "count"):  # a histogram point
                out.setdefault(name, {})[key] = p.count  # type: ignore[attr-defined]
                out.setdefault(f"{name}:sum", {})[key] = p.sum  # type: ignore[attr-defined]
            else:
                out.setdefault(name, {})[key] = p.value  # type: ignore[attr-defined]
    return out


def test_every_prometheus_series_has_its_otel_counterpart_and_back(caplog: pytest.LogCaptureFixture) -> None:
    """Both ways, series by series, after turns (fallbacks, error verdicts, transitions), a shadow
    pair, the monitor's own failures, drops, answers without reply, overheads and a refit: the
    names, label sets and values agree (histograms by count and sum). The per-turn test above
    only looked at the counters OTel has, so a Prometheus series OTel lacked went unnoticed."""
    from handoffmon.counts import ShadowKey
    from tests.exporters.refits import make_refit

    reader, guard = InMemoryMetricReader(), LabelGuard()
    otel = OTelExporter(meter_provider=MeterProvider(metric_readers=[reader]), guard=guard)
    prom = PrometheusExporter(CollectorRegistry(), guard=guard)
    for exporter in (otel, prom):
        for result in _turns():
            assert exporter.export(result)
        exporter.count_shadow({ShadowKey("json", "gpt", "claude", "prefix_only"): 2})
        exporter.count_error("store")
        exporter.count_drop(3)
        exporter.count_no_reply("failed")
        exporter.observe_overhead("finish", 0.002)
        assert exporter.publish_refit(make_refit())
    caplog.set_level(logging.WARNING, logger="opentelemetry")
    p, o = _prometheus_points(prom.registry), _otel_points(reader)
    assert not [r for r in caplog.records if "non-finite" in r.getMessage()]
    p = {name: series for name, series in p.items() if name.startswith("handoffmon_")}
    assert set(p) == set(o), (sorted(set(p) - set(o)), sorted(set(o) - set(p)))
    assert {"handoffmon_check_errors", "handoffmon_shadow_pair_stats", "handoffmon_handoff_risk"} <= set(o)
    # OTLP points are finite: a refit's +Inf (a half-life without decay) is left out, not warned
    # about by the SDK at every collection
    infinite = {(name, key) for name, series in p.items() for key, v in series.items() if math.isinf(v)}
    assert (
        "handoffmon_adherence_half_life_turns",
        (("after_handoff", "true"), ("fit", "local"), ("model", "claude"), ("rule", "json")),
    ) in infinite
    for name in sorted(p):
        finite = {key: v for key, v in p[name].items() if (name, key) not in infinite}
        assert o[name] == pytest.approx(finite), name
