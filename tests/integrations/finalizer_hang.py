"""Dropped streams collected inside the monitor's lock.

``run(threads, calls, timeout_s)`` (or ``python -m tests.integrations.finalizer_hang THREADS
CALLS TIMEOUT_S``) drops ``THREADS × CALLS``
streamed replies of a real ``litellm.Router`` (mock_response) through the wrapper, each
half-read and held in a reference cycle, so only the cyclic collector frees it. Automatic
collection is off; instead the collector is forced to run at the worst moment: on every
count the aggregates make, inside their lock (where an allocation could trigger it in
production). The attribution queue has 2 slots, so many reports are drops, which take
that same lock: a report made by the finalizer deadlocks the worker thread, then the
queues fill and every ``completion()`` blocks on the lock too.
Each iteration also makes one plain call, a turn the worker counts (and collects meanwhile).
Returns ``("ok", calls, turns + drops)`` when every call returned within ``timeout_s``, else
``("hung", calls done, -1)``: the deadlocked threads are daemons, left behind.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def run(threads: int, calls: int, timeout_s: float) -> tuple[str, int, int]:
    from handoffmon.config import HandoffmonConfig
    from handoffmon.integrations.router import RouterWrapper
    from handoffmon.pipeline.aggregates import Aggregates
    from handoffmon.pipeline.monitor import Monitor
    from tests.integrations.routers import fallback_router

    class CollectingAggregates(Aggregates):
        """Runs the collector inside the aggregates lock, on every count."""

        def _add(self, kind: str, key: Any, n: int = 1) -> None:
            gc.collect(0)
            super()._add(kind, key, n)

    config = HandoffmonConfig.model_validate(
        {"pipeline": {"attribution_queue_size": 2, "queue_size": 4}, "refit": {"interval_s": 0}}
    )
    monitor = Monitor(config, aggregates=CollectingAggregates())
    wrapped = RouterWrapper(fallback_router(), monitor)
    done = [0] * threads

    def client(i: int) -> None:
        for n in range(calls):
            stream: Any = wrapped.completion(
                model="alpha", messages=[{"role": "user", "content": f"t{i} n{n}"}], stream=True
            )
            next(iter(stream))
            stream.cycle = stream  # only the cyclic collector can free it now
            del stream
            # a finished turn: the worker counts it, and collects the dropped streams meanwhile
            wrapped.completion(model="alpha", messages=[{"role": "user", "content": f"t{i} n{n} again"}])
            done[i] += 2

    gc.disable()
    try:
        workers = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(threads)]
        for t in workers:
            t.start()
        deadline = time.monotonic() + timeout_s
        for t in workers:
            t.join(max(0.0, deadline - time.monotonic()))
    finally:
        gc.enable()
    if any(t.is_alive() for t in workers):
        return "hung", sum(done), -1  # the monitor's lock is held forever: leave it
    gc.collect()
    wrapped.completion(model="alpha", messages=[{"role": "user", "content": "last"}])  # drains the rest
    expected, reported = sum(done) + 1, -1
    end = time.monotonic() + timeout_s  # the finalizer thread may still hold the last report
    while time.monotonic() < end:
        monitor.flush(timeout_s)
        snap = monitor.snapshot()
        reported = snap.total_turns + snap.dropped
        if reported >= expected:
            break
        time.sleep(0.05)
    monitor.close(timeout_s)
    return "ok", sum(done), reported


if __name__ == "__main__":
    status, n, reported = run(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]))
    print(status, n, reported, flush=True)
    os._exit(0 if status == "ok" else 1)  # a deadlocked thread would keep a normal exit waiting
