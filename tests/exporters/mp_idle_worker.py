"""Child process for the idle-worker test: a multiprocess ``PrometheusExporter`` and a
``RoutingCollector`` whose table was refitted at UNIX time CREATED count one turn, then the worker
stays idle (no turn, no refit) until its stdin closes; it prints its process id once ready, and
at the end whether the file refresher still runs after the exporter's ``shutdown``.

Usage: python -m tests.exporters.mp_idle_worker CREATED REFRESH_S
"""

from __future__ import annotations

import os
import sys

from prometheus_client import CollectorRegistry

from handoffmon.exporters import prometheus
from handoffmon.exporters.routing_decisions import RoutingCollector
from handoffmon.testing import make_turn_result


def main(argv: list[str]) -> None:
    """One turn, then idle until stdin closes; then ``shutdown``."""
    assert "PROMETHEUS_MULTIPROC_DIR" in os.environ
    created, refresh_s = float(argv[0]), float(argv[1])
    prometheus.FILE_REFRESHER.interval_s = refresh_s
    routing = RoutingCollector(dict, lambda now: now - created)
    exporter = prometheus.PrometheusExporter(CollectorRegistry())
    assert exporter.export(make_turn_result())  # the first turn writes the files
    print(os.getpid(), flush=True)
    sys.stdin.read()  # idle: no turn, no refit, no shadow pair
    exporter.shutdown()
    print("refreshing" if prometheus.FILE_REFRESHER.running else "stopped", flush=True)
    assert routing is not None  # alive until here


if __name__ == "__main__":
    main(sys.argv[1:])
