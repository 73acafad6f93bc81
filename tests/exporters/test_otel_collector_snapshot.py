"""``OTelExporter.observe_collector`` reads a scrape-time collector once per OTel collection
cycle and serves all its families from that one reading (it read the whole collector once per
family: 13 ``collect()`` calls a cycle for the shadow and routing collectors)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client.core import Metric

from handoffmon.exporters.otel import OTelExporter
from handoffmon.exporters.routing_decisions import RoutingCollector
from handoffmon.exporters.shadow_calls import ShadowCollector
from handoffmon.labels import LabelGuard
from handoffmon.shadow.stats import ShadowStats

STATS = ShadowStats(
    calls={("handoff", "ok"): 5, ("no_handoff", "timeout"): 1},
    skipped={"not_sampled": 3, "busy": 1},
    checks={("handoff", "pass"): 2, ("no_handoff", "fail"): 1},
    pairs={"handoff": 4},
    tokens=1000.0,
    usd=1.5,
    budget_used={"calls": 1.0, "usd": 0.25},
    budget_limit={"calls": 60.0, "usd": float("inf")},  # no money cap
    breaker_open={"model-c": 0},
    pending=2,
)


class Counted(ShadowCollector):
    """The runtime's shadow collector, counting how often it is read."""

    reads = 0

    def collect(self) -> Iterator[Metric]:
        type(self).reads += 1
        yield from super().collect()


class CountedRouting(RoutingCollector):
    reads = 0

    def collect(self) -> Iterator[Metric]:
        type(self).reads += 1
        yield from super().collect()


def _points(reader: InMemoryMetricReader) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    data = reader.get_metrics_data()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name.startswith(("handoffmon_shadow_", "handoffmon_routing_")):
                    out[m.name] = {
                        tuple(sorted((k, str(v)) for k, v in (p.attributes or {}).items())): p.value
                        for p in m.data.data_points
                    }
    return out


@pytest.fixture(autouse=True)
def _reset() -> None:
    Counted.reads = CountedRouting.reads = 0


def test_one_collect_per_cycle_and_every_family_from_it(caplog: pytest.LogCaptureFixture) -> None:
    """5 cycles read each collector 5 times (not once per family); a change between cycles
    shows in every family of the next one; the +Inf limit is left out without a warning."""
    stats = [STATS]
    reader = InMemoryMetricReader()
    exp = OTelExporter(meter_provider=MeterProvider(metric_readers=[reader]), guard=LabelGuard())
    exp.observe_collector(Counted(lambda: stats[0], files=False))
    exp.observe_collector(
        CountedRouting(lambda: {("enforce", "reordered"): 3}, lambda now: 12.0, files=False)
    )
    Counted.reads = CountedRouting.reads = 0  # observe_collector read each once to learn its families
    caplog.set_level(logging.WARNING, logger="opentelemetry")
    first = _points(reader)
    assert (Counted.reads, CountedRouting.reads) == (1, 1)
    assert first["handoffmon_shadow_calls"] == {
        (("arm", "handoff"), ("outcome", "ok")): 5,
        (("arm", "no_handoff"), ("outcome", "timeout")): 1,
    }
    assert first["handoffmon_shadow_budget_limit"] == {(("window", "calls"),): 60.0}
    assert first["handoffmon_shadow_pending"] == {(): 2}
    assert first["handoffmon_routing_table_age_seconds"] == {(): 12.0}
    stats[0] = replace(STATS, calls={("handoff", "ok"): 9}, pending=7, tokens=2000.0)
    for _ in range(4):
        later = _points(reader)
    assert (Counted.reads, CountedRouting.reads) == (5, 5)
    assert later["handoffmon_shadow_calls"][(("arm", "handoff"), ("outcome", "ok"))] == 9
    assert later["handoffmon_shadow_pending"] == {(): 7}
    assert later["handoffmon_shadow_tokens"] == {(): 2000.0}
    assert not [r for r in caplog.records if "non-finite" in r.getMessage()]


def test_two_readers_each_get_a_fresh_reading() -> None:
    """Two metric readers (e.g. OTLP and a Prometheus reader) each read the collector anew."""
    stats = [STATS]
    a, b = InMemoryMetricReader(), InMemoryMetricReader()
    exp = OTelExporter(meter_provider=MeterProvider(metric_readers=[a, b]), guard=LabelGuard())
    exp.observe_collector(Counted(lambda: stats[0], files=False))
    Counted.reads = 0
    assert _points(a)["handoffmon_shadow_pending"] == {(): 2}
    stats[0] = replace(STATS, pending=5)
    assert _points(b)["handoffmon_shadow_pending"] == {(): 5}
    assert Counted.reads == 2
