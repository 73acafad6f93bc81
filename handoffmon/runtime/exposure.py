"""Where handoffmon's own registry is shown: in the application's registry, on ``metrics_port``."""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from handoffmon.config import TelemetryConfig
from handoffmon.errors import ConfigError, HandoffmonError
from handoffmon.exporters.serving import MetricsServer, start_metrics_server


class NestedRegistry(Collector):
    """handoffmon's registry as one collector of the application's registry.

    ``describe`` names every family, so the application's registry detects clashes and
    ``?name[]=`` filtering finds them even when it was built without ``auto_describe``;
    unregistering this one object removes every handoffmon series at close.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterable[Metric]:
        """Every family of handoffmon's registry, read at scrape time."""
        return self.registry.collect()

    def describe(self) -> Iterable[Metric]:
        """The families (names only matter), read once at registration."""
        return list(self.registry.collect())


def expose(own: CollectorRegistry, into: CollectorRegistry) -> NestedRegistry:
    """Register ``own`` inside ``into`` (e.g. ``prometheus_client.REGISTRY``).

    Raises:
        HandoffmonError: ``into`` already shows handoffmon series (another runtime
            exports there; share it instead of building a second one).
    """
    nested = NestedRegistry(own)
    try:
        into.register(nested)
    except ValueError as exc:  # prometheus_client's DuplicateTimeseries
        raise HandoffmonError(
            "this Prometheus registry already shows handoffmon series from another runtime: "
            "share that runtime (handoffmon.shared_runtime / wrap(..., runtime=)) or pass "
            f"registry=None to keep this one's series private ({exc})"
        ) from exc
    return nested


def serve_port(
    own: CollectorRegistry, telemetry: TelemetryConfig, source: str | None = None
) -> MetricsServer | None:
    """Serve ``own`` on ``telemetry.metrics_host:metrics_port`` when a port is set, with
    ``handoffmon_metrics_port_refusals_total`` (connections it closed unserved) added to ``own``.

    Raises:
        ConfigError: the port cannot be bound (names ``telemetry.metrics_port``), or the host
            does not resolve to an address of this machine (names ``telemetry.metrics_host``);
            with ``source``, the file the config came from.
    """
    if telemetry.metrics_port is None:
        return None
    try:
        server = start_metrics_server(
            own, telemetry.metrics_port, telemetry.metrics_host, token=telemetry.metrics_token
        )
    except OSError as exc:
        where = f"{telemetry.metrics_host}:{telemetry.metrics_port}"
        # a name that does not resolve (gaierror) or an address not on this host is the host's fault
        host_fault = isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL
        raise ConfigError(
            f"cannot serve /metrics on {where}: {exc.strerror or exc}",
            key="telemetry.metrics_host" if host_fault else "telemetry.metrics_port",
            source=source,
        ) from exc
    try:
        own.register(server.collector())  # what it closed unserved, on its own /metrics and beside it
    except Exception:
        server.close()
        raise
    return server
