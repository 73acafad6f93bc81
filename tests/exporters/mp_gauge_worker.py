"""Child process for the multiprocess gauge test: a ``PrometheusExporter`` of another handoffmon
version and model cap writes its gauges into PROMETHEUS_MULTIPROC_DIR, then prints its pid.

Usage: python -m tests.exporters.mp_gauge_worker VERSION MAX_MODELS
"""

from __future__ import annotations

import os
import sys

from prometheus_client import CollectorRegistry

import handoffmon.exporters.prometheus as prom
from handoffmon.labels import LabelGuard


def main(argv: list[str]) -> None:
    """Build one exporter as handoffmon ``VERSION`` capped at ``MAX_MODELS`` models."""
    assert "PROMETHEUS_MULTIPROC_DIR" in os.environ
    prom.__version__ = argv[0]  # the version build_info reads
    prom.PrometheusExporter(CollectorRegistry(), guard=LabelGuard(max_models=int(argv[1])))
    print(os.getpid())


if __name__ == "__main__":
    main(sys.argv[1:])
