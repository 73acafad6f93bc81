"""build_exporters: what telemetry turns on, fresh registries, a shared label guard, a light package root."""

from __future__ import annotations

import logging
import subprocess
import sys

from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from handoffmon.config import HandoffmonConfig
from handoffmon.exporters import RefitPublisher, build_exporters, prometheus_exporter
from handoffmon.exporters.logs import StructlogExporter
from handoffmon.exporters.otel import OTelEvents, OTelExporter
from handoffmon.exporters.prometheus import PrometheusExporter
from handoffmon.protocols import Exporter


def test_defaults_give_prometheus_and_logs_on_fresh_registries() -> None:
    """Default telemetry: Prometheus + turn logs, OTel off; two builds never share a registry."""
    first = build_exporters(HandoffmonConfig())
    second = build_exporters(HandoffmonConfig())
    assert [type(e) for e in first] == [PrometheusExporter, StructlogExporter]
    assert all(isinstance(e, Exporter) for e in first)
    assert prometheus_exporter(first).registry is not prometheus_exporter(second).registry


def test_flags_select_exporters_and_providers_enable_otel() -> None:
    """telemetry.otel adds the OTel exporters (its events first, then its counting, whose close
    flushes the providers); passing a provider does too; everything can be off."""
    cfg = HandoffmonConfig(telemetry={"otel": True, "prometheus": False, "log_turns": False})
    events, otel = build_exporters(cfg)
    assert isinstance(otel, OTelExporter) and events is otel.events
    assert type(otel).export_inline is True and not getattr(type(events), "export_inline", False)
    off = HandoffmonConfig(telemetry={"prometheus": False, "log_turns": False})
    assert build_exporters(off) == []
    assert [type(e) for e in build_exporters(off, tracer_provider=TracerProvider())] == [
        OTelEvents,
        OTelExporter,
    ]


def test_given_registry_and_caps_are_used() -> None:
    """The injected registry and telemetry.max_models reach the Prometheus exporter; OTel shares its guard."""
    reg = CollectorRegistry()
    cfg = HandoffmonConfig(
        telemetry={"otel": True, "max_models": 7}, rules=[{"name": "r", "check": "no_commas"}]
    )
    prom, events, otel, _ = build_exporters(cfg, registry=reg)
    assert isinstance(events, OTelEvents) and events.guard is prom.guard
    assert isinstance(prom, PrometheusExporter) and prom.registry is reg
    assert isinstance(otel, OTelExporter) and otel.guard is prom.guard
    assert prom.guard.usage()["model"] == (0, 7) and "r" in prom.guard.rules
    assert isinstance(prom, RefitPublisher) and isinstance(otel, RefitPublisher)


def test_stdlib_logger_is_wrapped() -> None:
    """A stdlib logger passed as `logger` receives rendered turn events."""
    logger = logging.getLogger("app.turns")
    (exp,) = build_exporters(HandoffmonConfig(telemetry={"prometheus": False}), logger=logger)
    assert isinstance(exp, StructlogExporter) and exp._stdlib is logger


def test_package_root_imports_no_exporter_stack() -> None:
    """`import handoffmon.exporters` pulls in neither prometheus_client, opentelemetry nor structlog."""
    heavy = ("prometheus_client", "opentelemetry", "structlog")
    code = f"import sys, handoffmon.exporters; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_refit_publisher_reaches_every_gauge_exporter() -> None:
    """refit_publisher() hands one RefitResult to the Prometheus and OTel exporters, skipping the others."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from prometheus_client import generate_latest

    from handoffmon.exporters import refit_publisher
    from tests.exporters.refits import make_refit

    reader = InMemoryMetricReader()
    exporters = build_exporters(
        HandoffmonConfig(),
        registry=CollectorRegistry(),
        meter_provider=MeterProvider(metric_readers=[reader]),
    )
    assert refit_publisher(exporters)(make_refit()) is True
    assert (
        'handoffmon_refit_last_success_timestamp_seconds{fit="local"} 1.8000001e+09'
        in generate_latest(prometheus_exporter(exporters).registry).decode()
    )
    names = {
        m.name
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    assert "handoffmon_refit_last_success_timestamp_seconds" in names
