"""Child process for the multiprocess scrape-time gauge test: a ``RoutingCollector`` whose table
is AGE seconds old and a ``ShadowCollector`` with BUDGET calls used and target model-b's breaker
BREAKER (0/1), beside a second ``ShadowCollector`` of another runtime in the process (1 call used,
breaker closed), write their series into PROMETHEUS_MULTIPROC_DIR the way the exporter does
(``sync_file_mirrors``); prints the process id.

Usage: python -m tests.exporters.mp_file_gauge_worker AGE BUDGET BREAKER
"""

from __future__ import annotations

import os
import sys

from handoffmon.exporters.routing_decisions import RoutingCollector
from handoffmon.exporters.serving import sync_file_mirrors
from handoffmon.exporters.shadow_calls import ShadowCollector
from handoffmon.shadow.stats import ShadowStats


def _stats(used: float, breaker: int) -> ShadowStats:
    return ShadowStats(
        calls={},
        skipped={},
        checks={},
        pairs={},
        tokens=0.0,
        usd=0.0,
        budget_used={"calls": used, "tokens": 10 * used},
        budget_limit={"calls": 60.0, "usd": float("inf")},
        breaker_open={"model-b": breaker},
        pending=int(used),
    )


def main(argv: list[str]) -> None:
    """Write a table of age ``AGE``, ``BUDGET`` shadow calls used, model-b's breaker ``BREAKER``."""
    assert "PROMETHEUS_MULTIPROC_DIR" in os.environ
    age, used, breaker = float(argv[0]), float(argv[1]), int(argv[2])
    routing = RoutingCollector(lambda: {("enforce", "reordered"): 1}, lambda now: age)
    shadow = ShadowCollector(lambda: _stats(used, breaker))
    other = ShadowCollector(lambda: _stats(1.0, 0))
    assert sync_file_mirrors() is None
    print(os.getpid())
    assert routing is not None and shadow is not None and other is not None  # alive until written


if __name__ == "__main__":
    main(sys.argv[1:])
