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

``--replay`` measures the per-turn work with nothing else running: the same turns are queued
while the pipeline is stopped, then drained back to back with the main thread idle. What it
prints is the stages' own cost (warm caches, no GIL contention, no polling), the number to
compare with the paced run above and with ``serve``'s pipeline thread.
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


def _conversations(
    wrapped: RouterWrapper,
    conversations: int,
    rng: random.Random,
    pace_s: float,
    after_each: Callable[[], object] | None = None,
) -> None:
    """``conversations`` conversations of ``TURNS`` turns through ``wrapped``, ``pace_s`` apart;
    ``after_each()`` after each conversation."""
    for _ in range(conversations):
        history: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
        for _ in range(TURNS):
            text = " ".join(rng.choice(WORDS) + str(rng.randrange(1000)) for _ in range(33))
            history.append({"role": "user", "content": text})
            sent = json.loads(json.dumps(history))  # a fresh copy, as a server sees it
            reply = wrapped.completion(model=rng.choice(("g1", "g2")), messages=sent)
            history.append({"role": "assistant", "content": reply.choices[0].message.content})
            if pace_s:
                time.sleep(pace_s)
        if after_each is not None:
            after_each()


def replay(conversations: int, seed: int = 1) -> dict[str, list[float]]:
    """Like :func:`measure`, but the turns are queued first and drained back to back by the
    pipeline's thread while the main thread waits: the stages' own CPU per turn.

    ``pipeline_threads`` is the drain's thread CPU per turn; ``turns_per_s`` its wall rate."""
    rng = random.Random(seed)
    out: dict[str, list[float]] = {"attribution": [], "checks": []}
    router = ZeroLatencyRouter({"g1": ("dep-1", "openai/m1"), "g2": ("dep-2", "openai/m2")})
    turns = conversations * TURNS
    queues = {"attribution_queue_size": turns, "queue_size": turns}
    config = config_from_mapping({"rules": RULES, "telemetry": {"log_turns": False}, "pipeline": queues})
    exporter = PrometheusExporter(CollectorRegistry())
    # numpy and the check modules are imported by the first turn: not part of the per-turn cost
    warm = Monitor(config, exporters=[PrometheusExporter(CollectorRegistry())])
    with warm:
        _conversations(RouterWrapper(router, warm), 2, random.Random(seed + 1), 0.0)
        warm.flush(30)
    with (
        _timed(AttributionStage, "handle", out["attribution"]),
        _timed(CheckStage, "process", out["checks"]),
        Monitor(config, exporters=[exporter], start=False) as m,
    ):
        _conversations(RouterWrapper(router, m), conversations, rng, 0.0)
        cpu0, t0 = _pipeline_threads_cpu(), time.perf_counter()
        m.start()
        if not m.flush(120):
            raise RuntimeError("the pipeline did not drain the replayed turns within 120 s")
        wall = time.perf_counter() - t0
        out["pipeline_threads"] = [(_pipeline_threads_cpu() - cpu0) / turns]
        out["turns_per_s"] = [turns / wall]
    if len(out["checks"]) != turns:
        raise RuntimeError(f"{len(out['checks'])} of {turns} turns were checked")
    return out


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
        _conversations(wrapped, conversations, rng, 0.0005, after_each=lambda: m.flush(30))
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
    parser.add_argument("--replay", action="store_true", help="queue first, then drain back to back")
    args = parser.parse_args()
    got = (replay if args.replay else measure)(args.conversations)
    for stage in ("attribution", "checks"):
        xs = got[stage]
        print(
            f"{stage:12s} n={len(xs):5d} thread CPU p50 {quantile(xs, 0.5) * 1e6:7.1f} µs "
            f"p99 {quantile(xs, 0.99) * 1e6:7.1f} µs mean {statistics.mean(xs) * 1e6:7.1f} µs"
        )
    if args.replay:
        print(
            f"drain: pipeline thread CPU {got['pipeline_threads'][0] * 1e6:7.1f} µs per turn, "
            f"{got['turns_per_s'][0]:.0f} turns/s"
        )
    else:
        print(
            f"whole run CPU per turn: process {got['process'][0] * 1e6:7.1f} µs, "
            f"handoffmon threads {got['pipeline_threads'][0] * 1e6:7.1f} µs"
        )


if __name__ == "__main__":
    main()
