"""Child process for the two-exporters-per-process test: two ``PrometheusExporter``s of one process
(two runtimes, say) count N turns each, alternating, into PROMETHEUS_MULTIPROC_DIR, and count a
monitor error each.

Usage: python -m tests.exporters.mp_two_exporters_worker N
"""

from __future__ import annotations

import os
import sys

from prometheus_client import CollectorRegistry

from handoffmon.exporters.prometheus import PrometheusExporter
from tests.exporters.turns import make_result


def main(argv: list[str]) -> None:
    """``N`` turns through each of two exporters, alternating."""
    assert "PROMETHEUS_MULTIPROC_DIR" in os.environ
    n = int(argv[0])
    a, b = PrometheusExporter(CollectorRegistry()), PrometheusExporter(CollectorRegistry())
    assert a.multiprocess and b.multiprocess
    for i in range(n):
        for exp in (a, b):
            exp.export(make_result(author="gpt", checks=[("json", "pass" if i % 2 else "fail")]))
    a.count_error("check")
    b.count_error("check")
    a.observe_overhead("attribution", 1e-4)
    b.observe_overhead("attribution", 1e-4)


if __name__ == "__main__":
    main(sys.argv[1:])
