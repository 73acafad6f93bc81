"""Attribution cost per request (attribute() p50/p99) for histories of 1-200 turns of ~500 chars.

Run: ``.venv/bin/python -m tests.benchmarks.bench_attribution [--reps N]``.

Each measured request is a fresh ``json.loads`` copy of the history (new string objects,
as a server sees them), against a memory store that already holds every earlier reply,
so it measures the steady state of a live conversation: one new user message per turn.
A turn is a user message and its reply, so "20 turns" is a request of 42 messages
(system + 20 pairs + the new user message). "replica" attributes with an Attributor that
did not record the last reply (another replica, or after a restart: chain and content
keys are asked for). "new-msg" puts a never-seen message in every request (its folding is
not cached yet).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from handoffmon.attribution import Attributor
from handoffmon.protocols import AttributionStore
from handoffmon.stores.memory import MemoryStore
from handoffmon.stores.sqlite import SQLiteStore

TURNS = (1, 10, 20, 50, 200)
WORDS = ("the", "model", "answered", "each", "question", "with", "care", "and", "cited", "policy")


def _text(rng: random.Random, chars: int = 500) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(WORDS) + str(rng.randrange(1000))
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


def _conversation(attributor: Attributor, turns: int, rng: random.Random) -> list[dict[str, str]]:
    """Play ``turns`` turns through the attributor; returns the history for turn ``turns + 1``."""
    history: list[dict[str, str]] = [{"role": "system", "content": "You are a helpful assistant."}]
    for k in range(turns):
        history.append({"role": "user", "content": _text(rng)})
        ctx = attributor.attribute(history)
        reply = _text(rng)
        attributor.persist(attributor.record(ctx, reply, ["model-a" if k % 3 else "model-b"]))
        history.append({"role": "assistant", "content": reply})
    history.append({"role": "user", "content": _text(rng)})
    return history


def _measure_record(turns: int, reps: int) -> float:
    """p50 of record() (the other request-path call: reply fingerprints + overlay insert)."""
    rng = random.Random(turns)
    attributor = Attributor(MemoryStore(), pending_max=10 * reps)
    history = _conversation(attributor, turns, rng)
    ctx = attributor.attribute(history)
    replies = [_text(rng) for _ in range(reps)]
    samples: list[float] = []
    for reply in replies:
        t0 = time.perf_counter()
        attributor.record(ctx, reply, ["model-a"])
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _measure(
    turns: int, reps: int, *, replica: bool = False, store: AttributionStore | None = None
) -> tuple[float, float, int]:
    """p50/p99 of attribute() on fresh copies of a ``turns``-turn history.

    ``replica``: attribute with a second Attributor on the same store, which did not
    record the last reply itself (another replica, or after a restart), so it asks for
    chain and content keys.
    """
    rng = random.Random(turns)
    attributor = Attributor(store if store is not None else MemoryStore())
    history = _conversation(attributor, turns, rng)
    if replica:
        attributor = Attributor(attributor.store)
    blob = json.dumps(history)
    copies = [json.loads(blob) for _ in range(reps)]
    for msgs in copies[: min(50, reps)]:  # warm-up: the history enters the text cache
        attributor.attribute(msgs)
    gc.collect()
    gc.freeze()  # the pre-built copies are not the request path's garbage: keep them out of GC passes
    samples: list[float] = []
    for msgs in copies:
        t0 = time.perf_counter()
        ctx = attributor.attribute(msgs)
        samples.append(time.perf_counter() - t0)
    gc.unfreeze()
    assert ctx.depth == turns + 1 and all(a.method == "chain" for a in ctx.attributions)
    samples.sort()
    return statistics.median(samples), samples[int(0.99 * (len(samples) - 1))], ctx.history_chars


def _measure_cold(turns: int, reps: int) -> float:
    """p50 when every request carries a message the text cache has never seen (first sight)."""
    rng = random.Random(turns)
    attributor = Attributor(MemoryStore())
    history = _conversation(attributor, turns, rng)
    samples: list[float] = []
    for _ in range(reps):
        msgs = json.loads(json.dumps(history))
        msgs[-1]["content"] = _text(rng)
        t0 = time.perf_counter()
        attributor.attribute(msgs)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> None:
    """Print p50/p99 per history size."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=2000)
    args = parser.parse_args()
    head = ("turns", "messages", "chars", "p50 us", "p99 us", "replica p50 us", "new-msg p50 us")
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, (5, 8, 7, 8, 8, 15, 15), strict=True)))
    for turns in TURNS:
        reps = max(200, args.reps // max(1, turns // 20))
        p50, p99, chars = _measure(turns, reps)
        replica = _measure(turns, reps, replica=True)[0]
        cold = _measure_cold(turns, max(100, reps // 4))
        us = f"{p50 * 1e6:>8.1f} {p99 * 1e6:>8.1f} {replica * 1e6:>15.1f} {cold * 1e6:>15.1f}"
        print(f"{turns:>5} {2 * turns + 2:>8} {chars:>7} {us}")
    print(f"record() of a new ~500-char reply: p50 {_measure_record(20, args.reps) * 1e6:.1f} us")
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "bench.db")
        p50, p99, _ = _measure(20, args.reps // 2, store=store)
        replica = _measure(20, args.reps // 2, replica=True, store=store)[0]
        store.close()
    figures = f"p50 {p50 * 1e6:.1f} us, p99 {p99 * 1e6:.1f} us, replica p50 {replica * 1e6:.1f} us"
    print(f"SQLite store, 20 turns: {figures}")


if __name__ == "__main__":
    main()
