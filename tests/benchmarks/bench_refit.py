"""Refit speed: full refit for K = 10, 30, 50, 100 models × 10 rules × 7 buckets, and paired BCa
for 81 cells × 200 episodes × 1000 resamples. Targets: K = 100 ≤ 1 s, BCa ≤ 1 s.

Run: ``.venv/bin/python -m tests.benchmarks.bench_refit [--repeats N]``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np

from handoffmon.depth import DepthBuckets
from handoffmon.refit import refit
from handoffmon.refit.bootstrap import bca_means
from handoffmon.refit.cells import build_cells
from tests.refit.synth import plant, synth_counts


def timings(fn: Callable[[], object], repeats: int) -> tuple[float, float, float]:
    """p50 and p99 wall seconds and p50 CPU seconds over ``repeats`` calls (after a warm-up).

    CPU time is printed beside wall time because the benchmark host may be shared: on
    an oversubscribed machine wall time inflates while CPU time stays the intrinsic cost.
    """
    fn()
    wall, cpu = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return float(np.percentile(wall, 50)), float(np.percentile(wall, 99)), float(np.percentile(cpu, 50))


def main() -> None:
    """Print one line per case: wall p50/p99, CPU p50, target and p99 / target; then the load."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(_load())
    buckets = DepthBuckets((1, 2, 3, 5, 9, 17, 33))
    print(f"{'case':52s} {'p50 s':>8s} {'p99 s':>8s} {'cpu p50':>8s} {'target':>7s} {'p99/target':>10s}")
    for k in (10, 30, 50, 100):
        rng = np.random.default_rng(k)
        counts = synth_counts(plant(k, 10, rng), rng, n_trans=200, buckets=buckets)
        keys = len(counts.checks) + len(counts.transitions)
        target = 1.0 if k == 100 else None
        p50, p99, cpu = timings(lambda c=counts: build_cells(c, buckets), args.repeats)
        print(f"{f'counts -> arrays K={k} ({keys} keys)':52s} {p50:8.3f} {p99:8.3f} {cpu:8.3f}")
        p50, p99, cpu = timings(lambda c=counts: refit(c, buckets=buckets), args.repeats)
        tail = f"{target:7.1f} {p99 / target:10.2f}" if target else f"{'-':>7s} {'-':>10s}"
        print(f"{f'full refit K={k} x 10 rules x 7 buckets':52s} {p50:8.3f} {p99:8.3f} {cpu:8.3f} {tail}")
    data = np.random.default_rng(0).binomial(1, 0.6, (81, 200)).astype(float)
    base = np.random.default_rng(1).binomial(1, 0.6, (81, 200)).astype(float)
    p50, p99, cpu = timings(lambda: bca_means(data - base, resamples=1000, rng=0), args.repeats)
    case = "paired BCa 81 cells x 200 episodes x 1000 resamples"
    print(f"{case:52s} {p50:8.3f} {p99:8.3f} {cpu:8.3f} {1.0:7.1f} {p99:10.2f}")
    from scipy import stats

    one = timings(
        lambda: stats.bootstrap(
            (data[0], base[0]), lambda x, y, axis: np.mean(x - y, axis=axis), paired=True,
            n_resamples=1000, method="BCa", rng=np.random.default_rng(0),
        ),
        max(1, args.repeats // 2),
    )  # fmt: skip
    case = "scipy paired BCa, 1 cell (x81 for the matrix)"
    print(f"{case:52s} {one[0]:8.3f} {one[1]:8.3f} {one[2]:8.3f}")
    print(f"{'  => scipy for 81 cells, extrapolated':52s} {81 * one[0]:8.3f} {'':8s} {81 * one[2]:8.3f}")


def _load() -> str:
    try:
        return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    except OSError:
        return "load average unavailable"


if __name__ == "__main__":
    main()
