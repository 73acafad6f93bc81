"""The OpenTelemetry instruments carry the same series as the Prometheus counters for the same turns."""

from __future__ import annotations

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
