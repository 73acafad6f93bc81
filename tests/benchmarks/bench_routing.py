"""Cost of risk-aware fallback ordering on the request path: the decision, the prefix lookup, the adapter.

Run: ``.venv/bin/python -m tests.benchmarks.bench_routing [--reps N]``.

1. ``FallbackPolicy.decide`` with three candidates against a K = 6 table (reordering),
   and with no table (the fail-safe path);
2. ``PrefixLookup.authors`` on 20-turn histories (~500-char messages, fresh
   ``json.loads`` copies) against a memory store holding every earlier reply: the last
   author, and the last and first (``return_home``);
3. the wrapped Router's routing step (``RouterRouting.apply``: candidates, lookup,
   decision, per-request fallbacks) on the same histories, and the LiteLLM Proxy hook's
   step (``RouterRouting.apply_body`` on the request body);
4. ``handoffmon serve``'s body rewrite (``BodyRouting.rewrite``: parse, lookup, decision,
   re-encode) on the same histories as JSON bytes, and a body without ``fallbacks``
   (forwarded untouched).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from handoffmon.attribution import Attributor
from handoffmon.config import RoutingConfig
from handoffmon.routing import Candidate, FallbackPolicy, PairRisk, PairRiskTable
from handoffmon.routing.prefix import PrefixLookup
from handoffmon.stores.memory import MemoryStore
from tests.benchmarks.bench_attribution import _conversation

MODELS = ("model-a", "model-b", "m1", "m2", "m3", "m4")
"""The K = 6 table's models; bench_attribution's histories are written by model-a and model-b."""


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def timed(fn: Callable[[], object], reps: int) -> tuple[float, float]:
    """(p50, p99) seconds of ``fn()`` over ``reps`` calls (after a short warm-up)."""
    for _ in range(min(100, reps)):
        fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out), _pct(out, 0.99)


def table(now: float) -> PairRiskTable:
    """A K = 6 table where m1 is a risky suffix for every prefix."""
    rng = random.Random(1)
    pairs = {
        (a, b): PairRisk(-0.15 if b == "m1" else rng.uniform(-0.02, 0.02), 0.01)
        for a in MODELS
        for b in MODELS
        if a != b
    }
    return PairRiskTable(pairs, created_at=now)


def measure_decide(reps: int) -> dict[str, tuple[float, float]]:
    """decide() with a table (reorders) and without one."""
    now = time.time()
    policy = FallbackPolicy(RoutingConfig(enabled=True))
    t = table(now)
    cands = tuple(Candidate(f"g{m}", m) for m in ("m1", "m2", "m3"))
    return {
        "decide(), 3 candidates, reorders": timed(lambda: policy.decide(t, "model-a", cands, now=now), reps),
        "decide(), no table (router order)": timed(
            lambda: policy.decide(None, "model-a", cands, now=now), reps
        ),
    }


def histories(turns: int = 20, n: int = 50) -> tuple[Attributor, list[str]]:
    """An attributor over a memory store holding ``n`` played conversations; their next-turn JSON."""
    attributor = Attributor(MemoryStore())
    rng = random.Random(turns)
    return attributor, [json.dumps(_conversation(attributor, turns, rng)) for _ in range(n)]


def measure_lookup(reps: int) -> dict[str, tuple[float, float]]:
    """PrefixLookup.authors on fresh copies of 20-turn histories (last author; last and first)."""
    attributor, docs = histories()
    lookup = PrefixLookup(attributor)
    out: dict[str, tuple[float, float]] = {}
    for label, home in (("prefix lookup, 20 turns", False), ("prefix + home lookup, 20 turns", True)):
        copies = iter([json.loads(docs[i % len(docs)]) for i in range(reps + 100)])
        out[label] = timed(lambda home=home, it=copies: lookup.authors(next(it), home=home), reps)
    assert lookup.authors(json.loads(docs[0]), home=True)[1] is not None
    return out


def router_routing() -> tuple[Any, list[str]]:
    """A ``RouterRouting`` (enforce) on a real ``litellm.Router`` (mock deployments) with three
    fallbacks for ``gmodel-a``, the K = 6 table published; and the histories' JSON."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from litellm import Router

    from handoffmon.attribution.names import ModelNames
    from handoffmon.integrations.router_routing import RouterRouting
    from handoffmon.routing import RoutingState

    attributor, docs = histories()
    router = Router(
        model_list=[
            {"model_name": f"g{m}", "litellm_params": {"model": f"openai/{m}", "mock_response": "hi"}}
            for m in MODELS
        ],
        fallbacks=[{"gmodel-a": ["gm1", "gm2", "gm3"]}],
    )
    state = RoutingState(RoutingConfig(enabled=True, mode="enforce", return_home=False))
    state.holder.table = table(time.time())
    names = ModelNames({f"openai/{m}": m for m in MODELS})
    return RouterRouting(router, state, PrefixLookup(attributor), names), docs


def measure_adapter(reps: int) -> dict[str, tuple[float, float]]:
    """RouterRouting.apply (the wrapped Router's step) on fresh copies of 20-turn histories."""
    routing, docs = router_routing()
    out = routing.apply("gmodel-a", json.loads(docs[0]), {})
    assert out is not None and out["fallbacks"][0]["gmodel-a"][-1] == "gm1", "m1 is risky: tried last"
    copies = iter([json.loads(docs[i % len(docs)]) for i in range(reps + 100)])
    return {
        "Router routing step (enforce), 20 turns": timed(
            lambda: routing.apply("gmodel-a", next(copies), {}), reps
        )
    }


def measure_proxy_hook(reps: int) -> dict[str, tuple[float, float]]:
    """RouterRouting.apply_body (the LiteLLM Proxy pre-call hook's step) on request bodies."""
    routing, docs = router_routing()
    body = {"model": "gmodel-a", "messages": json.loads(docs[0])}
    assert routing.apply_body(body) and body["fallbacks"][0]["gmodel-a"][-1] == "gm1", "m1 is risky: last"
    bodies = iter(
        [{"model": "gmodel-a", "messages": json.loads(docs[i % len(docs)])} for i in range(reps + 100)]
    )
    return {
        "LiteLLM Proxy hook step (enforce), 20 turns": timed(lambda: routing.apply_body(next(bodies)), reps)
    }


def measure_serve_body(reps: int) -> dict[str, tuple[float, float]]:
    """BodyRouting.rewrite on 20-turn chat bodies with fallbacks (reordered), and without (untouched)."""
    from handoffmon.routing import RoutingState
    from handoffmon.routing.body import BodyRouting

    attributor, docs = histories()
    state = RoutingState(RoutingConfig(enabled=True, mode="enforce", return_home=False))
    state.holder.table = table(time.time())
    routing = BodyRouting(state, PrefixLookup(attributor), lambda name: name[1:])  # "gm1" -> "m1"
    with_fb = [
        json.dumps(
            {
                "model": "gmodel-a",
                "messages": json.loads(d),
                "fallbacks": [{"gmodel-a": ["gm1", "gm2", "gm3"]}],
            }
        ).encode()
        for d in docs
    ]
    without = [json.dumps({"model": "gmodel-a", "messages": json.loads(d)}).encode() for d in docs]
    out = routing.rewrite(with_fb[0])
    assert out is not None and json.loads(out)["fallbacks"][0]["gmodel-a"][-1] == "gm1", "m1 is risky: last"
    n = len(docs)
    i = iter(range(10**9))
    return {
        "serve body rewrite (enforce), 20 turns": timed(lambda: routing.rewrite(with_fb[next(i) % n]), reps),
        "serve body without fallbacks (untouched)": timed(
            lambda: routing.rewrite(without[next(i) % n]), reps
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=20_000)
    args = parser.parse_args()
    rows = {**measure_decide(args.reps), **measure_lookup(args.reps // 10)}
    rows.update(measure_adapter(args.reps // 10))
    rows.update(measure_proxy_hook(args.reps // 10))
    rows.update(measure_serve_body(args.reps // 10))
    for label, (p50, p99) in rows.items():
        print(f"{label:45s} p50 {p50 * 1e6:7.2f} µs   p99 {p99 * 1e6:7.2f} µs")


if __name__ == "__main__":
    main()
