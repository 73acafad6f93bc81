"""Per-turn export cost (p50/p99) of the Prometheus, OpenTelemetry and structlog exporters, side by side.

Run: ``.venv/bin/python -m tests.benchmarks.bench_export [--turns N]``.

Every exporter gets the same TurnResults (5 models, depths 1-20, 3 rules, transitions,
attribution methods), measured one ``export()`` call at a time after a warm-up. The OTel
exporter runs on a real SDK: a BatchSpanProcessor whose exporter discards spans (the
batch queue and span building are measured; the network is not) and a MeterProvider
with an in-memory reader. Logs render JSON to a stdlib logger whose handler writes to
/dev/null. "otel metrics" is the counting, which runs on the check thread with Prometheus';
"otel span" the span and events, on a thread of their own. "all three" is one turn through
all of them back to back, which is what the pipeline's threads spend in total per turn. The
last line is the cost of rendering /metrics for the registry the run produced.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import statistics
import time
from collections.abc import Callable, Sequence

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from prometheus_client import CollectorRegistry, generate_latest

from handoffmon.exporters.logs import StructlogExporter
from handoffmon.exporters.otel import OTelExporter
from handoffmon.exporters.prometheus import PrometheusExporter
from handoffmon.labels import LabelGuard
from handoffmon.types import TurnResult
from tests.exporters.turns import make_result

MODELS = ("gpt-4o", "claude-sonnet", "llama-70b", "mistral-large", "gemini-pro")
RULES = ("json", "lang", "length")


class _Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def turns(n: int, seed: int = 1) -> list[TurnResult]:
    """n realistic turns: random author/prefix, 3 checks, transitions after depth 1."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        depth = rng.randint(1, 20)
        author = rng.choice(MODELS)
        prefix = "none" if depth == 1 else rng.choice((author, author, rng.choice(MODELS)))
        checks = [(r, rng.choice(("pass", "pass", "fail", "not_applicable"))) for r in RULES]
        trans = [(r, "pass", v) for r, v in checks if depth > 1 and v != "not_applicable"]
        out.append(
            make_result(
                conversation_id=f"conv-{i % 500}",
                depth=depth,
                author=author,
                prefix_model=prefix,
                checks=checks,
                transitions=trans,
                history_tokens=depth * 300,
            )
        )
    return out


def measure(fn: Callable[[TurnResult], object], results: list[TurnResult]) -> list[float]:
    """Seconds per call, after a warm-up pass over the first 500 results."""
    for r in results[:500]:
        fn(r)
    samples = []
    for r in results:
        t0 = time.perf_counter()
        fn(r)
        samples.append(time.perf_counter() - t0)
    return samples


def _q(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100)[int(q * 100) - 1] if len(samples) > 1 else samples[0]


def build(exemplars: bool = False) -> tuple[dict[str, Callable[[TurnResult], object]], CollectorRegistry]:
    """Fresh exporters for one run, keyed by the row name, and the Prometheus registry."""
    guard = LabelGuard(rules=RULES)
    prom = PrometheusExporter(CollectorRegistry(), guard=guard, exemplars=exemplars, multiprocess=False)
    tp = TracerProvider()
    tp.add_span_processor(BatchSpanProcessor(_Discard(), max_queue_size=65536))
    otel = OTelExporter(
        tracer_provider=tp,
        meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]),
        guard=guard,
        span="own",
    )
    logger = logging.getLogger("bench.turns")
    logger.propagate = False
    logger.handlers = [logging.StreamHandler(open(os.devnull, "w"))]  # noqa: SIM115 - lives for the run
    logger.setLevel(logging.INFO)
    logs = StructlogExporter(logger)

    def all_three(r: TurnResult) -> None:
        prom.export(r)
        otel.events.export(r)
        otel.export(r)
        logs.export(r)

    rows = {
        "prometheus": prom.export,
        "otel metrics": otel.export,
        "otel span (own thread)": otel.events.export,
        "structlog json": logs.export,
        "all three": all_three,
    }
    return rows, prom.registry


def main(argv: Sequence[str] | None = None) -> None:
    """Print p50/p99/mean µs per turn for each exporter."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20_000)
    args = parser.parse_args(argv)
    results = turns(args.turns)
    print(f"{'exporter':<28}{'p50 µs':>10}{'p99 µs':>10}{'mean µs':>10}   ({args.turns} turns)")
    rows, registry = build()
    with_exemplars, _ = build(exemplars=True)
    rows["prometheus + exemplars"] = with_exemplars["prometheus"]
    for name, fn in rows.items():
        s = measure(fn, results)
        print(
            f"{name:<28}{_q(s, 0.5) * 1e6:>10.1f}{_q(s, 0.99) * 1e6:>10.1f}{statistics.fmean(s) * 1e6:>10.1f}"
        )
    text = generate_latest(registry)
    scrape = measure(lambda _: generate_latest(registry), results[:50] * 4)
    series = sum(1 for line in text.decode().splitlines() if line and not line.startswith("#"))
    print(
        f"{'render /metrics':<28}{_q(scrape, 0.5) * 1e3:>9.2f}m{_q(scrape, 0.99) * 1e3:>9.2f}m"
        f"{statistics.fmean(scrape) * 1e3:>9.2f}m   ({series} samples, ms)"
    )


if __name__ == "__main__":
    main()
