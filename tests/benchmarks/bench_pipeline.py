"""The background pipeline's CPU per turn: the attribution stage and the check stage (rules, state,
aggregates with the conversation-clustered sums, Prometheus export inline), thread CPU per call.

Run: ``.venv/bin/python -m tests.benchmarks.bench_pipeline [--conversations N]``.

Conversations of 10 turns go through ``wrap(Router)`` around a zero-latency router with two
deployments picked at random per turn (so handoffs fill off-diagonal cells), 0.5 ms apart,
with ``bench_proxy``'s three rules and a ``PrometheusExporter``, as ``handoffmon serve`` runs
them. Each stage's handler is timed with ``time.thread_time`` on its own thread: the CPU it
takes from the process, which is what competes with the request path for the GIL and the
cores (wall time on a shared host would mostly measure the host).

It also prints the CPU of the whole run per turn: the process (``time.process_time``, the
request path included) and the pipeline's own threads (``handoffmon-*``, their idle polling
included, which the per-call timings miss), from the first turn to the last flush.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import CollectorRegistry

from handoffmon.config import config_from_mapping
from handoffmon.exporters.prometheus import PrometheusExporter
from handoffmon.integrations.router import RouterWrapper
from handoffmon.pipeline.attribution_stage import AttributionStage
from handoffmon.pipeline.check_stage import CheckStage
from handoffmon.pipeline.monitor import Monitor
from tests.benchmarks.bench_proxy import RULES
from tests.integrations.zero_router import ZeroLatencyRouter

TURNS = 10
WORDS = ("policy", "answer", "model", "turn", "ring", "context", "reply", "user")


@contextmanager
def _timed(cls: type, name: str, out: list[float]) -> Iterator[None]:
    """Record the thread CPU seconds of every call of ``cls.name`` while inside."""
    original: Callable[..., Any] = getattr(cls, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            out.append(time.thread_time() - t0)

    setattr(cls, name, timed)
    try:
        yield
    finally:
        setattr(cls, name, original)


def _pipeline_threads_cpu() -> float:
    """CPU seconds of the live ``handoffmon-*`` threads so far."""
    total = 0.0
    for t in threading.enumerate():
        if t.name.startswith("handoffmon-") and t.ident is not None:
            with contextlib.suppress(OSError):  # ended meanwhile
                total += time.clock_gettime(time.pthread_getcpuclockid(t.ident))
    return total


def measure(conversations: int, seed: int = 1) -> dict[str, list[float]]:
    """Thread CPU seconds per turn of each stage (``attribution``, ``checks``); one value each
    for the whole run's CPU per turn: ``process`` and ``pipeline_threads``."""
    rng = random.Random(seed)
    out: dict[str, list[float]] = {"attribution": [], "checks": []}
    router = ZeroLatencyRouter({"g1": ("dep-1", "openai/m1"), "g2": ("dep-2", "openai/m2")})
    config = config_from_mapping({"rules": RULES, "telemetry": {"log_turns": False}})
    exporter = PrometheusExporter(CollectorRegistry())
    with (
        _timed(AttributionStage, "handle", out["attribution"]),
        _timed(CheckStage, "process", out["checks"]),
        Monitor(config, exporters=[exporter]) as m,
    ):
        wrapped = RouterWrapper(router, m)
        cpu0 = time.process_time()
        for _ in range(conversations):
            history: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
            for _ in range(TURNS):
                text = " ".join(rng.choice(WORDS) + str(rng.randrange(1000)) for _ in range(33))
                history.append({"role": "user", "content": text})
                sent = json.loads(json.dumps(history))  # a fresh copy, as a server sees it
                reply = wrapped.completion(model=rng.choice(("g1", "g2")), messages=sent)
                history.append({"role": "assistant", "content": reply.choices[0].message.content})
                time.sleep(0.0005)
            m.flush(30)
        turns = conversations * TURNS
        out["process"] = [(time.process_time() - cpu0) / turns]
        out["pipeline_threads"] = [_pipeline_threads_cpu() / turns]
    return out


def quantile(xs: list[float], q: float) -> float:
    """The ``q`` quantile (inclusive method)."""
    return statistics.quantiles(xs, n=100, method="inclusive")[int(q * 100) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=200)
    args = parser.parse_args()
    got = measure(args.conversations)
    for stage in ("attribution", "checks"):
        xs = got[stage]
        print(
            f"{stage:12s} n={len(xs):5d} thread CPU p50 {quantile(xs, 0.5) * 1e6:7.1f} µs "
            f"p99 {quantile(xs, 0.99) * 1e6:7.1f} µs mean {statistics.mean(xs) * 1e6:7.1f} µs"
        )
    print(
        f"whole run CPU per turn: process {got['process'][0] * 1e6:7.1f} µs, "
        f"handoffmon threads {got['pipeline_threads'][0] * 1e6:7.1f} µs"
    )


if __name__ == "__main__":
    main()
