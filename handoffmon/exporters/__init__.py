"""Telemetry exporters (Prometheus, OpenTelemetry, structlog) and ``build_exporters`` from config.

Submodules import their third-party stacks; this package root imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider
    from prometheus_client import CollectorRegistry

    from handoffmon.config import HandoffmonConfig
    from handoffmon.labels import LabelGuard
    from handoffmon.protocols import Exporter
    from handoffmon.refit.result import RefitResult

__all__ = ["RefitPublisher", "build_exporters", "prometheus_exporter", "refit_publisher"]


@runtime_checkable
class RefitPublisher(Protocol):
    """Exporters that turn a ``RefitResult`` into gauges (Prometheus, OTel)."""

    def publish_refit(self, result: RefitResult) -> bool:
        """Replace the refit gauges; False on failure (never raises)."""
        ...


def build_exporters(
    config: HandoffmonConfig,
    *,
    registry: CollectorRegistry | None = None,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    logger_provider: Any = None,
    logger: Any = None,
    guard: LabelGuard | None = None,
) -> list[Exporter]:
    """The exporters ``config.telemetry`` asks for, sharing one label guard.

    - ``telemetry.prometheus`` → ``PrometheusExporter`` on ``registry`` (a fresh
      ``CollectorRegistry`` when None; never the global one unless passed). Serve it with
      ``serving.start_metrics_server(exporter.registry, port)``.
    - ``telemetry.otel`` (or any provider passed) → ``OTelExporter`` (the counting, inline)
      and its ``events`` (events and own span, on a thread of their own) on the given
      providers, else on the OTel API's current global ones (never installs providers).
    - ``telemetry.log_turns`` → ``StructlogExporter`` (``logger``: a structlog logger
      used as is, a stdlib logger, or None for stdlib ``handoffmon.turns``) rendering
      ``telemetry.log_format``.

    Args:
        config: the root configuration (caps, rules, depth buckets, telemetry).
        registry: Prometheus registry for the metrics.
        tracer_provider: OpenTelemetry tracer provider.
        meter_provider: OpenTelemetry meter provider.
        logger_provider: OpenTelemetry logger provider (``gen_ai.evaluation.result`` events).
        logger: destination of per-turn log events.
        guard: the label guard to share (with the monitor's aggregates); built from
            ``config`` when None.

    Returns:
        Exporters in the order Prometheus, OpenTelemetry, logs (those enabled).
    """
    from handoffmon.labels import LabelGuard

    telemetry = config.telemetry
    guard = guard if guard is not None else LabelGuard.from_config(config)
    out: list[Exporter] = []
    if telemetry.prometheus:
        from prometheus_client import CollectorRegistry

        from handoffmon.exporters.prometheus import PrometheusExporter

        reg = registry if registry is not None else CollectorRegistry()
        out.append(PrometheusExporter.from_config(config, reg, guard=guard))
    providers = (tracer_provider, meter_provider, logger_provider)
    if telemetry.otel or any(p is not None for p in providers):
        from handoffmon.exporters.otel import OTelExporter

        otel = OTelExporter.from_config(
            config,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            logger_provider=logger_provider,
            guard=guard,
        )
        # the events first: the counting exporter's close flushes the providers after their
        # thread has drained
        out += [otel.events, otel]
    if telemetry.log_turns:
        from handoffmon.exporters.logs import StructlogExporter

        out.append(StructlogExporter(logger, fmt=telemetry.log_format))
    return out


def prometheus_exporter(exporters: list[Exporter]) -> Any:
    """The ``PrometheusExporter`` among ``exporters`` (its ``.registry`` is what to serve), or None."""
    from handoffmon.exporters.prometheus import PrometheusExporter

    return next((e for e in exporters if isinstance(e, PrometheusExporter)), None)


def refit_publisher(exporters: Sequence[object]) -> Callable[[RefitResult], bool]:
    """One callable that hands a refit to every ``RefitPublisher`` among ``exporters``.

    The runtime's periodic refit publishes through it. The returned function never
    raises and returns True when every publisher succeeded.
    """
    targets = [e for e in exporters if isinstance(e, RefitPublisher)]

    def publish(result: RefitResult) -> bool:
        return all([t.publish_refit(result) for t in targets])

    return publish
