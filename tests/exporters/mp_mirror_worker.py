"""Child process for the multiprocess routing/shadow counter test: a runtime with routing on
(``build_runtime`` registers its ``RoutingCollector``) and a ``ShadowCollector`` over growing
stats count decisions and shadow calls, then one turn (after which the exporter writes what grew),
into PROMETHEUS_MULTIPROC_DIR, beside a second ``ShadowCollector`` with one call; prints what this
process counted as JSON.

Usage: python -m tests.exporters.mp_mirror_worker DECISIONS SHADOW_CALLS
"""

from __future__ import annotations

import json
import os
import sys

from handoffmon.exporters.shadow_calls import ShadowCollector
from handoffmon.shadow.stats import ShadowStats
from tests.pipeline.helpers import make_config, run_conversation, runtime


def _stats(calls: int) -> ShadowStats:
    return ShadowStats(
        calls={("handoff", "ok"): calls, ("no_handoff", "timeout"): 1},
        skipped={"not_sampled": 2 * calls},
        checks={("handoff", "pass"): calls},
        pairs={"handoff": calls},
        tokens=10.0 * calls,
        usd=0.5 * calls,
        budget_used={"calls": 1.0},
        budget_limit={"calls": 60.0},
        breaker_open={"model-b": 0},
        pending=0,
    )


def main(argv: list[str]) -> None:
    """Count ``DECISIONS`` routing decisions and ``SHADOW_CALLS`` shadow calls, then one turn."""
    assert "PROMETHEUS_MULTIPROC_DIR" in os.environ
    decisions, calls = int(argv[0]), int(argv[1])
    current = [_stats(0)]
    shadow = ShadowCollector(lambda: current[0])
    other = ShadowCollector(lambda: _stats(1))  # a second runtime's shadow in this process
    with runtime(make_config(routing={"enabled": True})) as rt:
        assert rt.routing is not None
        for i in range(decisions):
            rt.routing.counts.count("dry_run", "reordered" if i % 3 == 0 else "unchanged")
        current[0] = _stats(calls)
        run_conversation(rt.monitor, ["gpt"], user="hello")
        assert rt.flush(30)
        counted = {f"{m},{o}": n for (m, o), n in rt.routing.counts.snapshot().items()}
    print(json.dumps({"routing": counted, "shadow_calls": calls}))
    assert shadow is not None and other is not None  # alive until here, like registered collectors


if __name__ == "__main__":
    main(sys.argv[1:])
