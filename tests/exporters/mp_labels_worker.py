"""Child process for the shared-label-cap test: exports turns by many models into PROMETHEUS_MULTIPROC_DIR.

Usage: python -m tests.exporters.mp_labels_worker CAP MODELS TURNS_EACH GO_FILE
(MODELS comma-separated, in the order this worker first sees them; the worker waits for GO_FILE
to exist so that two workers start admitting names at the same moment.)
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from prometheus_client import CollectorRegistry

from handoffmon.exporters.prometheus import PrometheusExporter
from handoffmon.labels import LabelGuard
from tests.exporters.turns import make_result


def main(argv: list[str]) -> None:
    """Export ``TURNS_EACH`` turns by every model of ``MODELS`` under a ``CAP``-model guard."""
    assert "PROMETHEUS_MULTIPROC_DIR" in os.environ
    cap, models, n, go = int(argv[0]), argv[1].split(","), int(argv[2]), Path(argv[3])
    exp = PrometheusExporter(CollectorRegistry(), guard=LabelGuard(max_models=cap))
    assert exp.multiprocess
    deadline = time.monotonic() + 30
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.001)
    for model in models:
        for i in range(n):
            exp.export(make_result(conversation_id=f"{os.getpid()}-{model}-{i}", author=model))


if __name__ == "__main__":
    main(sys.argv[1:])
