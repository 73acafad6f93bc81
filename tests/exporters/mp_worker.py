"""Child process for the multiprocess test: counts turns and publishes a refit into PROMETHEUS_MULTIPROC_DIR.

Usage: python -m tests.exporters.mp_worker MODEL N_TURNS REFIT_CREATED_AT [drop-claude-pair]
(REFIT_CREATED_AT ``none``: publish no refit.)
"""

from __future__ import annotations

import os
import sys

from prometheus_client import CollectorRegistry

from handoffmon.exporters.prometheus import PrometheusExporter
from tests.exporters.refits import make_refit
from tests.exporters.turns import make_result


def main(argv: list[str]) -> None:
    """Export ``N_TURNS`` json-checked turns by ``MODEL`` and publish one refit."""
    assert "PROMETHEUS_MULTIPROC_DIR" in os.environ
    model, n, created = argv[0], int(argv[1]), float(argv[2] if argv[2] != "none" else "nan")
    exp = PrometheusExporter(CollectorRegistry())  # multiprocess mode detected from the environment
    assert exp.multiprocess
    for i in range(n):
        exp.export(make_result(author=model, checks=[("json", "pass" if i % 2 else "fail")]))
    exp.count_error("check")
    exp.observe_overhead("attribution", 1e-4)
    if argv[2] == "none":
        return
    exp.publish_refit(make_refit(created_at=created))
    if len(argv) > 3:
        exp.publish_refit(make_refit(created_at=created + 1, with_claude_pair=False))


if __name__ == "__main__":
    main(sys.argv[1:])
