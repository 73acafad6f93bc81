"""A stand-in handoffmon process for the Prometheus-source test.

It counts a deterministic stream of synthetic turns into both a SQLite-persisted local
``Aggregates`` and a ``PrometheusExporter``, serves ``/metrics`` and waits on stdin.
Run: ``python -m tests.sources.replica --seed 1 --turns 3000 --port P --sqlite F``.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import threading

import numpy as np
from prometheus_client import CollectorRegistry

from handoffmon.counts import ShadowKey
from handoffmon.depth import DepthBuckets
from handoffmon.exporters.prometheus import PrometheusExporter
from handoffmon.exporters.serving import start_metrics_server
from handoffmon.pipeline.aggregates import Aggregates
from handoffmon.pipeline.state import ConversationState
from handoffmon.shadow.recorder import PairRecorder
from handoffmon.types import CheckResult, Transition, TurnContext, TurnRecord, TurnResult

MODELS = ("m0", "m1", "m2", "m3")
RULES = ("json", "lang")
VERDICT_CHOICES = ("pass", "fail", "not_applicable", "error")


def synthetic_turns(seed: int, n: int):  # type: ignore[no-untyped-def]
    """Deterministic TurnResults: depths 1–40, handoffs more likely deep, some unknown prefixes."""
    rng = np.random.default_rng(seed)
    buckets = DepthBuckets()
    states: dict[str, ConversationState] = {}
    for i in range(n):
        depth = int(rng.integers(1, 41))
        author = MODELS[int(rng.integers(len(MODELS)))]
        if depth == 1:
            prefix = "none"
        elif rng.random() < 0.05:
            prefix = "unknown"
        elif rng.random() < min(0.1 + depth / 50, 0.8):
            prefix = MODELS[int(rng.integers(len(MODELS)))]
        else:
            prefix = author
        cid = f"c{seed}-{i // 4}"  # four turns per conversation: cluster sums see clusters
        ctx = TurnContext(cid, "caller", depth, 100 * depth, 25 * depth, prefix, 1.0, 1, (), i)
        handoff = ctx.handoff_for(author)
        rec = TurnRecord(author, (author,), None, None, 0, 0, 0.1, 50, False, handoff)
        verdicts = rng.choice(VERDICT_CHOICES, size=len(RULES), p=(0.6, 0.3, 0.07, 0.03))
        checks = tuple(CheckResult(r, str(v)) for r, v in zip(RULES, verdicts, strict=True))  # type: ignore[arg-type]
        trans = ()
        if depth > 1:
            prev = rng.choice(("pass", "fail"), size=len(RULES), p=(0.7, 0.3))
            trans = tuple(
                Transition(r, str(p), str(v)) for r, p, v in zip(RULES, prev, verdicts, strict=True)
            )  # type: ignore[arg-type]
        clean = prefix == author and bool(rng.random() < 0.7)
        states[cid], cluster = states.get(cid, ConversationState()).tally(author, prefix, clean, checks)
        yield TurnResult(
            ctx, rec, buckets.bucket(depth), checks, trans, ("chain",), clean=clean, cluster=cluster
        )


class ShadowPairs:
    """Shadow pairs of a share of the synthetic turns, as the live runner records them
    (``PairRecorder``): a handoff turn A→B shadowed by A, a same-author turn by the next model.
    Its own random stream, so the turns are the same with or without it."""

    def __init__(self, seed: int, rate: float) -> None:
        self.rng = np.random.default_rng([seed, 7])
        self.rate = rate
        self.recorder = PairRecorder()

    def pair(self, turn: TurnResult) -> dict[ShadowKey, int]:
        """The turn's shadow increments (empty: not sampled, depth 1 or an unknown prefix)."""
        author, prefix = turn.record.author, turn.context.prefix_model
        if prefix not in MODELS or self.rng.random() >= self.rate:
            return {}
        handoff = prefix != author
        model = author if handoff else MODELS[(MODELS.index(author) + 1) % len(MODELS)]
        verdicts = {}
        for check in turn.checks:
            if check.verdict in ("pass", "fail"):
                served, other = check.verdict == "pass", bool(self.rng.random() < 0.65)
                verdicts[check.rule] = (served, other) if handoff else (other, served)
        return self.recorder.add(turn.context.conversation_id, prefix, model, handoff, verdicts)


def main(argv: list[str] | None = None) -> None:
    """Count, serve, print ``ready``, block until stdin closes."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--turns", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--sqlite", required=True)
    ap.add_argument(
        "--stream-per-s", type=float, default=0.0, help="after ready, keep counting this many turns a second"
    )
    ap.add_argument(
        "--shadow-rate", type=float, default=0.0, help="share of turns shadowed (ShadowPairs; exported only)"
    )
    args = ap.parse_args(argv)
    aggregates = Aggregates(args.sqlite)
    registry = CollectorRegistry()
    exporter = PrometheusExporter(registry)
    turns = synthetic_turns(args.seed, 10**9 if args.stream_per_s else args.turns)
    shadow = ShadowPairs(args.seed, args.shadow_rate)

    def count(turn: TurnResult) -> None:
        assert exporter.export(turn)
        if args.shadow_rate and (pair := shadow.pair(turn)):
            exporter.count_shadow(pair)

    for turn in itertools.islice(turns, args.turns):
        aggregates.add_turn(turn)
        count(turn)
    aggregates.flush()
    server = start_metrics_server(registry, args.port)
    print("ready", flush=True)
    if args.stream_per_s:  # live traffic while Prometheus scrapes (windowed reads, restarts)
        done = threading.Event()
        threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
        while not done.wait(1.0 / args.stream_per_s):
            count(next(turns))
    else:
        sys.stdin.read()
    server.close()
    aggregates.close()


if __name__ == "__main__":
    main()
