"""The series a runtime adds beside the exporters' own (routing decisions and table age, shadow
calls, budgets, breaker) reach OpenTelemetry too, with Prometheus' values: metrics.md says the
OTel exporter emits the same instruments under the names without ``_total``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry

from handoffmon.exporters import prometheus_exporter
from tests.pipeline.helpers import make_config, runtime

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]
PREFIXES = ("handoffmon_routing_", "handoffmon_shadow_")


def _prometheus(registry: CollectorRegistry) -> Series:
    out: Series = {}
    for family in registry.collect():
        for s in family.samples:
            if s.name.startswith(PREFIXES) and not s.name.endswith("_created"):
                out[(s.name.removesuffix("_total"), tuple(sorted(s.labels.items())))] = s.value
    return out


def _otel(reader: InMemoryMetricReader) -> tuple[Series, dict[str, Any]]:
    out: Series = {}
    kinds: dict[str, Any] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if not m.name.startswith(PREFIXES):
                    continue
                kinds[m.name] = m.data
                for p in m.data.data_points:
                    labels = tuple(sorted((k, str(v)) for k, v in (p.attributes or {}).items()))
                    out[(m.name, labels)] = p.value
    return out, kinds


def test_routing_and_shadow_series_are_otel_instruments_with_prometheus_values() -> None:
    reader = InMemoryMetricReader()
    config = make_config(
        telemetry={"otel": True, "prometheus": True, "log_turns": False},
        routing={"enabled": True},
        shadow={"enabled": True, "sample_rate": 1.0, "targets": ["model-c"]},
        refit={"interval_s": 0},
    )
    with runtime(config, meter_provider=MeterProvider(metric_readers=[reader])) as rt:
        assert rt.routing is not None
        for i in range(5):
            rt.routing.counts.count("dry_run", "reordered" if i % 2 else "unchanged")
        registry = prometheus_exporter(list(rt.monitor.exporters)).registry
        own = getattr(rt, "registry", registry)
        prom = {**_prometheus(registry), **_prometheus(own)}
        otel, kinds = _otel(reader)
    assert prom[("handoffmon_routing_decisions", (("mode", "dry_run"), ("outcome", "reordered")))] == 2
    assert any(name.startswith("handoffmon_shadow_") for name, _ in prom)
    assert otel == prom
    assert kinds["handoffmon_routing_decisions"].is_monotonic
    assert not hasattr(kinds["handoffmon_shadow_budget_limit"], "is_monotonic")  # a gauge


CHILD = """
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from tests.pipeline.helpers import make_config, runtime

config = make_config(
    telemetry={"otel": True, "prometheus": False, "log_turns": False},
    routing={"enabled": True},
    shadow={"enabled": True, "sample_rate": 1.0, "targets": ["model-c"]},
    refit={"interval_s": 0},
)
reader = InMemoryMetricReader()
with runtime(config, meter_provider=MeterProvider(metric_readers=[reader])) as rt:
    rt.routing.counts.count("dry_run", "reordered")
    names = {m.name for rm in reader.get_metrics_data().resource_metrics
             for sm in rm.scope_metrics for m in sm.metrics}
    assert {"handoffmon_routing_decisions", "handoffmon_shadow_budget_limit"} <= names, names
"""


@pytest.mark.slow
def test_with_prometheus_off_no_metric_file_is_written_for_otel_alone(tmp_path: Path) -> None:
    """Prometheus off, ``PROMETHEUS_MULTIPROC_DIR`` set (the application's, from the process
    start, as prometheus_client needs it): the routing and shadow series reach OTel, and
    handoffmon writes no metric file into the application's directory (only the label guard's
    shared admissions, ``handoffmon_labels_*``)."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=root, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("handoffmon_labels_")] == []
