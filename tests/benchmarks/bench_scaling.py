"""Scaling curves: attribution vs history, refit vs models, store bytes per turn, checkers vs reply size.

Run: ``.venv/bin/python -m tests.benchmarks.bench_scaling [--quick] [--only NAME ...]``.

Each curve prints a small table and saves a PNG under ``bench-results/``:

- ``attribution``: ``Attributor.attribute()`` p50/p99 on histories of 1-500 turns (~500-char
  messages; every earlier reply recorded; a fresh ``json.loads`` copy per request), the
  same steady-state request as ``bench_attribution``.
- ``refit``: full refit (Δ, decomposition, Markov, shapes) for K = 5-100 models × 10 rules
  × 7 depth buckets of synthetic counts (``tests.refit.synth``, as ``bench_refit``).
- ``store_memory``: bytes per tracked turn held by the memory store (Python heap, by
  tracemalloc), the SQLite store (file bytes) and the Redis store (``used_memory`` of a
  private ``redis-server``), after 10-turn conversations were written through the real
  Attributor (chain + content key per reply) plus one conversation state per conversation.
- ``checkers``: p50 µs per checker (and the default rule pack) on replies of 100 chars to
  100 KB (slices of real model answers).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[2] / "bench-results"

Row = dict[str, Any]


def _plot(
    name: str,
    title: str,
    xlabel: str,
    ylabel: str,
    series: dict[str, tuple[list[float], list[float]]],
    *,
    logx: bool = True,
    logy: bool = True,
) -> Path | None:
    """Save one line per series as bench-results/scaling-<name>.png (skipped without matplotlib).

    matplotlib is no dependency of handoffmon (not even dev): the numbers go to the runner's
    JSON; the pictures are for whoever installed matplotlib to look at them.
    """
    try:
        import matplotlib
    except ImportError:
        print(f"    (no matplotlib: scaling-{name}.png not drawn)", flush=True)
        return None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for label, (xs, ys) in series.items():
        ax.plot(xs, ys, marker="o", label=label)
    ax.set_xscale("log" if logx else "linear")
    ax.set_yscale("log" if logy else "linear")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"scaling-{name}.png"
    fig.savefig(path)
    plt.close(fig)
    return path


# -- attribution vs history length ---------------------------------------------------------


def attribution(quick: bool) -> list[Row]:
    """attribute() p50/p99 µs for 1-500-turn histories."""
    from tests.benchmarks.bench_attribution import _measure

    turns_list = (1, 10, 50, 100, 500) if quick else (1, 2, 5, 10, 20, 50, 100, 200, 500)
    rows: list[Row] = []
    for turns in turns_list:
        reps = max(60, (300 if quick else 2000) // max(1, turns // 10))
        p50, p99, chars = _measure(turns, reps)
        rows.append(
            {
                "turns": turns,
                "messages": 2 * turns + 2,
                "chars": chars,
                "reps": reps,
                "p50_us": p50 * 1e6,
                "p99_us": p99 * 1e6,
                "p50_us_per_message": p50 * 1e6 / (2 * turns + 2),
            }
        )
    xs = [float(r["turns"]) for r in rows]
    _plot(
        "attribution",
        "attribute() cost vs history length",
        "turns in the history (~500 chars/message)",
        "µs per request",
        {"p50": (xs, [r["p50_us"] for r in rows]), "p99": (xs, [r["p99_us"] for r in rows])},
    )
    return rows


# -- refit vs number of models -------------------------------------------------------------


def refit_models(quick: bool) -> list[Row]:
    """Full refit wall time for K models × 10 rules × 7 buckets."""
    import numpy as np

    from handoffmon.depth import DepthBuckets
    from handoffmon.refit import refit
    from tests.refit.synth import plant, synth_counts

    buckets = DepthBuckets()
    refit(synth_counts(plant(3, 2, np.random.default_rng(0)), np.random.default_rng(0)), buckets=buckets)
    rows: list[Row] = []
    for k in (5, 10, 20, 50) if quick else (5, 10, 20, 30, 50, 75, 100):
        rng = np.random.default_rng(k)
        counts = synth_counts(plant(k, 10, rng), rng, n_trans=200)
        repeats = 3 if k <= 30 else 1
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            refit(counts, buckets=buckets)
            samples.append(time.perf_counter() - t0)
        rows.append(
            {
                "models": k,
                "count_keys": len(counts.checks) + len(counts.transitions),
                "repeats": repeats,
                "p50_s": statistics.median(samples),
                "max_s": max(samples),
            }
        )
        del counts
    xs = [float(r["models"]) for r in rows]
    _plot(
        "refit",
        "full refit time vs number of models (10 rules, 7 buckets)",
        "models K",
        "seconds",
        {"p50": (xs, [r["p50_s"] for r in rows])},
    )
    return rows


# -- memory per tracked turn -----------------------------------------------------------------


def _write_turns(store: Any, turns: int, turns_per_conversation: int = 10, chained: bool = False) -> None:
    """Write ``turns`` replies (10-turn conversations) through the real Attributor into ``store``;
    ``chained``: as Responses API calls chained by ``previous_response_id`` (each call sends
    its new message only; each reply also keyed by its response id, ADR 0011)."""
    import random

    from handoffmon.attribution import Attributor
    from handoffmon.pipeline.state import ConversationState, LastVerdict
    from tests.benchmarks.bench_attribution import _text

    rng = random.Random(turns)
    attributor = Attributor(store)
    for c in range(turns // turns_per_conversation):
        history: list[dict[str, str]] = [{"role": "system", "content": "You are a helpful assistant."}]
        previous: str | None = None
        for k in range(1, turns_per_conversation + 1):
            history.append({"role": "user", "content": _text(rng, 300)})
            rid = f"resp_{c:08d}_{k:03d}_" + "x" * 40 if chained else None  # OpenAI ids are ~50 chars
            sent = history[-1:] if previous else history
            ctx = (
                attributor.attribute(sent, previous_response_id=previous)
                if chained
                else attributor.attribute(history)
            )
            previous = rid
            reply = _text(rng, 300)
            recorded = attributor.record(ctx, reply, ["model-a" if (c + k) % 3 else "model-b"], rid)
            attributor.persist(recorded)
            state = ConversationState(depth=k, last={"rule": LastVerdict("pass", k)})
            store.put_state(recorded.conversation_id, state.to_mapping())
            history.append({"role": "assistant", "content": reply})


def _memory_store_bytes(turns: int, chained: bool = False) -> float:
    from handoffmon.stores.memory import MemoryStore

    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    store = MemoryStore(max_conversations=10**7)
    _write_turns(store, turns, chained=chained)
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert store.key_count > 0
    return used


def _sqlite_store_bytes(turns: int) -> float:
    from handoffmon.stores.sqlite import SQLiteStore

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mem.db"
        store = SQLiteStore(path)
        empty = sum(p.stat().st_size for p in Path(tmp).iterdir())
        _write_turns(store, turns)
        store.close()
        return sum(p.stat().st_size for p in Path(tmp).iterdir()) - empty


def _redis_store_bytes(turns: int, url: str) -> float:
    import redis

    from handoffmon.config import StoreConfig
    from handoffmon.stores import make_store

    client = redis.Redis.from_url(url)
    client.flushall()
    base = int(client.info("memory")["used_memory"])
    store = make_store(StoreConfig(backend="redis", url=url, timeout_s=5.0))
    _write_turns(store, turns)
    store.close()
    used = int(client.info("memory")["used_memory"]) - base
    client.close()
    return used


def store_memory(quick: bool) -> list[Row]:
    """Bytes per tracked turn for the memory, SQLite and Redis stores at several sizes."""
    sizes = (1_000, 5_000) if quick else (1_000, 5_000, 20_000)
    measure: dict[str, Callable[[int], float]] = {
        "memory": _memory_store_bytes,
        "memory, Responses chains": lambda n: _memory_store_bytes(n, chained=True),
        "sqlite": _sqlite_store_bytes,
    }
    server = _private_redis()
    if server is not None:
        measure["redis"] = lambda n: _redis_store_bytes(n, server.url)
    rows: list[Row] = []
    try:
        for name, fn in measure.items():
            for n in sizes:
                used = fn(n)
                rows.append({"store": name, "turns": n, "bytes": used, "bytes_per_turn": used / n})
    finally:
        if server is not None:
            server.stop()
    series = {
        name: (
            [float(r["turns"]) for r in rows if r["store"] == name],
            [r["bytes_per_turn"] for r in rows if r["store"] == name],
        )
        for name in measure
    }
    _plot(
        "store-memory",
        "store memory per tracked turn",
        "tracked turns (10-turn conversations)",
        "bytes per turn",
        series,
        logy=False,
    )
    return rows


def _private_redis() -> Any:
    """A private redis-server on a free port (never the system one), or None without the binary."""
    import shutil

    if shutil.which("redis-server") is None:
        print("  (no redis-server: Redis store row skipped)")
        return None
    from tests.stores.redis_server import RedisServer

    server = RedisServer()
    server.start()
    return server


# -- checker cost vs reply size --------------------------------------------------------------

SIZE_CHECKERS: list[tuple[str, str, dict[str, object]]] = [
    ("regex_must_match", "regex_must_match", {"pattern": r"(?i)\b(?:therefore|in summary)\b"}),
    ("keywords_present(3)", "keywords_present", {"keywords": ["data", "model", "result"]}),
    ("length:words (max 800: stops early)", "length", {"unit": "words", "max": 800}),
    ("length:sentences", "length", {"unit": "sentences", "max": 40}),
    ("valid_json (JSON documents)", "valid_json", {}),
    ("language", "language", {"languages": ["en"]}),
    (
        "ifeval:number_words",
        "ifeval:length_constraints:number_words",
        {"num_words": 300, "relation": "at least"},
    ),
]


def checkers(quick: bool) -> list[Row]:
    """p50 µs per checker and for the default pack, by reply size."""
    from handoffmon.checkers import CheckContext, RuleSet
    from handoffmon.checkers.pack import default_rule_pack
    from tests.benchmarks.bench_checkers import _replies, bench_checker

    sizes = (100, 1_000, 10_000, 100_000) if quick else (100, 300, 1_000, 3_000, 10_000, 30_000, 100_000)
    pack = RuleSet.from_config(default_rule_pack(languages=()), budget_s=10.0)
    ctx = CheckContext()
    rows: list[Row] = []
    for size in sizes:
        count = 20 if size >= 30_000 else 50
        replies = _replies(size, count)
        repeat = 1 if quick or size >= 10_000 else 3
        as_json = [json.dumps({"answer": r[: max(1, size - 14)]}) for r in replies]  # valid documents, ≈ size
        for label, kind, params in SIZE_CHECKERS:
            res = bench_checker(kind, params, as_json if kind == "valid_json" else replies, repeat)
            p50, p99 = res[0], res[1]  # newer bench_checkers also returns mean CPU µs
            rows.append({"checker": label, "chars": size, "p50_us": p50, "p99_us": p99})
        samples = []
        for r in replies:
            t0 = time.perf_counter()
            pack.evaluate(r, ctx)
            samples.append(time.perf_counter() - t0)
        rows.append(
            {
                "checker": f"default pack ({len(pack.rules)} rules)",
                "chars": size,
                "p50_us": statistics.median(samples) * 1e6,
                "p99_us": max(samples) * 1e6,
            }
        )
    names = list(dict.fromkeys(r["checker"] for r in rows))
    series = {
        n: (
            [float(r["chars"]) for r in rows if r["checker"] == n],
            [r["p50_us"] for r in rows if r["checker"] == n],
        )
        for n in names
    }
    _plot("checkers", "checker cost vs reply size (p50)", "reply characters", "µs per check", series)
    return rows


CURVES: dict[str, Callable[[bool], list[Row]]] = {
    "attribution": attribution,
    "refit": refit_models,
    "store_memory": store_memory,
    "checkers": checkers,
}


def _print(name: str, rows: list[Row]) -> None:
    print(f"\n== {name} ==")
    if not rows:
        return
    cols = list(rows[0])
    print(" ".join(f"{c:>18}" for c in cols))
    for r in rows:
        print(" ".join(f"{v:>18.3f}" if isinstance(v, float) else f"{v!s:>18}" for v in r.values()))


def run(quick: bool = False, only: tuple[str, ...] = ()) -> dict[str, list[Row]]:
    """Run the curves (all, or those named in ``only``); print each table; return rows by curve."""
    out = {}
    for name, fn in CURVES.items():
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        out[name] = fn(quick)
        _print(name, out[name])
        print(f"  ({time.perf_counter() - t0:.0f}s; plot in {RESULTS}/)")
    return out


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer points and repetitions")
    parser.add_argument("--only", nargs="*", choices=sorted(CURVES), default=[])
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    results = run(args.quick, tuple(args.only))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "scaling.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
