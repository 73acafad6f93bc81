"""The wrapper's added latency vs calling the same router directly, with 20-turn histories.

Run: ``.venv/bin/python -m tests.benchmarks.bench_overhead [--reps N] [--litellm-reps N]``.

Side by side in one run, alternating direct and wrapped calls on the same fresh copy of
a 20-turn history (``json.loads``, as a server sees it; ~300-char messages, every
earlier reply already recorded, so attribution walks the full chain):

1. a zero-latency router with litellm's call surface (isolates handoffmon's cost);
2. a real ``litellm.Router`` with ``mock_response`` (the cost in context).

Added latency = wrapped − direct at the same percentile. The attribution thread and the
background worker (checking one rule per turn) run while measuring, as in production;
each row also prints how many wrapped calls overflowed the attribution queue (recorded
on the request path and dropped: back to back, a zero-latency router outruns them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from handoffmon.config import config_from_mapping
from handoffmon.integrations.router import RouterWrapper
from handoffmon.pipeline.monitor import Monitor
from tests.integrations.zero_router import ZeroLatencyRouter

TURNS = 20
CONFIG = {"rules": [{"name": "short", "check": "length", "params": {"unit": "words", "max": 200}}]}


def _text(rng: random.Random, chars: int = 300) -> str:
    words = ("policy", "answer", "model", "turn", "check", "context", "reply", "user")
    out: list[str] = []
    while sum(len(w) + 1 for w in out) < chars:
        out.append(rng.choice(words) + str(rng.randrange(1000)))
    return " ".join(out)


def _history(wrapped: Any, model: str, rng: random.Random) -> str:
    """Play 20 turns through the wrapper; returns the JSON of the history for turn 21."""
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    for _ in range(TURNS):
        history.append({"role": "user", "content": _text(rng)})
        reply = wrapped.completion(model=model, messages=history)
        history.append({"role": "assistant", "content": reply.choices[0].message.content})
    history.append({"role": "user", "content": _text(rng)})
    return json.dumps(history)


def _pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=1000, method="inclusive")[int(q * 1000) - 1]


def _side_by_side(
    direct: Callable[[Any], Any],
    wrapped: Callable[[Any], Any],
    histories: list[str],
    reps: int,
    pace_s: float = 0.0,
    timer: Callable[[], float] = time.perf_counter,
) -> tuple[list[float], list[float]]:
    """Alternate direct and wrapped calls; ``pace_s`` of idle time after each pair (untimed).

    ``timer=time.thread_time`` measures the request thread's CPU time instead of wall time:
    it excludes waiting for a CPU or the GIL, so it is stable on a loaded machine.
    """
    d_times: list[float] = []
    w_times: list[float] = []
    for i in range(reps):
        h = histories[i % len(histories)]
        pair = ((direct, d_times), (wrapped, w_times))
        for fn, out in pair if i % 2 else pair[::-1]:
            msgs = json.loads(h)
            t0 = timer()
            fn(msgs)
            out.append(timer() - t0)
        if pace_s:
            time.sleep(pace_s)
    return d_times, w_times


def _report(label: str, d: list[float], w: list[float], overflows: int | None = None) -> None:
    d50, d99, w50, w99 = _pct(d, 0.5), _pct(d, 0.99), _pct(w, 0.5), _pct(w, 0.99)
    print(
        f"{label:<40} direct p50 {d50 * 1e6:9.1f} µs p99 {d99 * 1e6:9.1f} µs | "
        f"wrapped p50 {w50 * 1e6:9.1f} µs p99 {w99 * 1e6:9.1f} µs | "
        f"added p50 {(w50 - d50) * 1e6:7.1f} µs p99 {(w99 - d99) * 1e6:7.1f} µs | ratio p50 {w50 / d50:6.2f}"
        + ("" if overflows is None else f" | overflowed {overflows}/{len(w)}")
    )


def _overflows(m: Monitor, since: list[int]) -> int:
    """Attribution-queue overflows since the last call (``since`` holds the previous total)."""
    now = m.attribution_overflows
    n, since[0] = now - since[0], now
    return n


def bench_zero(reps: int, pace_s: float) -> None:
    """Zero-latency router: sync and async, back to back (saturated) and paced."""
    router = ZeroLatencyRouter({"g": ("dep-1", "openai/m1")})
    with Monitor(config_from_mapping(CONFIG)) as m:
        wrapped = RouterWrapper(router, m)
        rng = random.Random(1)
        histories = [_history(wrapped, "g", rng) for _ in range(50)]
        m.flush(30)
        seen = [m.attribution_overflows]
        loop = asyncio.new_event_loop()
        sync = (
            lambda msgs: router.completion(model="g", messages=msgs),
            lambda msgs: wrapped.completion(model="g", messages=msgs),
        )
        async_ = (
            lambda msgs: loop.run_until_complete(router.acompletion(model="g", messages=msgs)),
            lambda msgs: loop.run_until_complete(wrapped.acompletion(model="g", messages=msgs)),
        )
        paced = f"paced {pace_s * 1e3:.1f} ms"
        scenarios: list[tuple[str, tuple[Callable[[Any], Any], Callable[[Any], Any]], int, float, Any]] = [
            ("zero-latency, back to back", sync, reps, 0.0, time.perf_counter),
            (f"zero-latency, {paced}", sync, reps // 4, pace_s, time.perf_counter),
            (f"zero-latency, {paced}, thread CPU", sync, reps // 4, pace_s, time.thread_time),
            ("zero-latency, acompletion", async_, reps, 0.0, time.perf_counter),
            (f"zero-latency, acompletion {paced}", async_, reps // 4, pace_s, time.perf_counter),
        ]
        for label, (direct, wrapped_call), n, pace, timer in scenarios:
            d, w = _side_by_side(direct, wrapped_call, histories, n, pace, timer=timer)
            _report(label, d, w, _overflows(m, seen))
            m.flush(30)
        loop.close()
        print(f"  monitor: {m.stats}")


def bench_litellm(reps: int) -> None:
    """A real litellm.Router answering from mock_response."""
    from litellm import Router

    router = Router(
        model_list=[
            {
                "model_name": "g",
                "litellm_params": {"model": "openai/m1", "api_key": "k", "mock_response": "a mocked reply"},
                "model_info": {"id": "dep-1"},
            }
        ]
    )
    with Monitor(config_from_mapping(CONFIG)) as m:
        wrapped = RouterWrapper(router, m)
        rng = random.Random(2)
        histories = [_history(wrapped, "g", rng) for _ in range(5)]
        m.flush(30)
        d, w = _side_by_side(
            lambda msgs: router.completion(model="g", messages=msgs),
            lambda msgs: wrapped.completion(model="g", messages=msgs),
            histories,
            reps,
        )
        _report("litellm.Router mock_response", d, w)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20_000, help="samples per side, zero-latency router")
    parser.add_argument("--litellm-reps", type=int, default=400, help="samples per side, litellm.Router")
    parser.add_argument("--pace-ms", type=float, default=1.0, help="idle time between paced pairs")
    args = parser.parse_args()
    print(f"20-turn histories ({2 * TURNS + 2} messages); reps {args.reps} / {args.litellm_reps}")
    bench_zero(args.reps, args.pace_ms / 1e3)
    bench_litellm(args.litellm_reps)


if __name__ == "__main__":
    main()
