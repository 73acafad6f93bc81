"""Child process for the failing-refresh test: a multiprocess ``PrometheusExporter`` counts one turn
and prints its process id; after a line on stdin (the test has taken its directory away meanwhile)
a ``RoutingCollector`` joins, whose table timestamp needs a file of its own (the ``livemin``
gauges) that cannot be created now, so every write of the files fails; the worker then prints
``routing`` and stays idle until its stdin closes, or, with ``turn``, counts one more turn and
flushes (the check thread's own write of the files) first.

Usage: python -m tests.exporters.mp_unwritable_worker REFRESH_S [turn]
"""

from __future__ import annotations

import os
import sys

from prometheus_client import CollectorRegistry

from handoffmon.exporters import prometheus
from handoffmon.exporters.routing_decisions import RoutingCollector
from handoffmon.testing import make_turn_result


def main(argv: list[str]) -> None:
    """One turn; wait for the test; a routing collector (and a turn); idle until stdin closes."""
    assert "PROMETHEUS_MULTIPROC_DIR" in os.environ
    prometheus.FILE_REFRESHER.interval_s = float(argv[0])
    exporter = prometheus.PrometheusExporter(CollectorRegistry())
    assert exporter.export(make_turn_result())  # the first turn writes the files, starts the timer
    print(os.getpid(), flush=True)
    sys.stdin.readline()
    routing = RoutingCollector(dict, lambda now: 60.0)
    if argv[1:] == ["turn"]:
        assert exporter.export(make_turn_result())
        assert exporter.force_flush()
    print("routing", flush=True)
    sys.stdin.read()
    exporter.shutdown()
    assert routing is not None  # alive until here


if __name__ == "__main__":
    main(sys.argv[1:])
