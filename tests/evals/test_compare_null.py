"""eval compare under a planted null: production and eval share one chain; flags at the nominal rate.

A checkpoint at depth 9 sits at the shallow end of production's 9–16 bucket. With a
slowly decaying chain the bucket mean is well below a(9), and comparing the two directly
calls the eval "too clean" far more often than alpha; matching depths within the bucket
(``depth_match``) brings it back to alpha.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from handoffmon.counts import CheckKey, Counts, TransitionKey, TurnKey
from handoffmon.depth import DepthBuckets
from handoffmon.evals.compare import adjusted_one_sided_test, compare
from handoffmon.evals.results import EvalResult, adherence_curves
from handoffmon.evals.shapes import shapes_from_counts
from handoffmon.evals.store import Row
from handoffmon.types import NO_PREFIX

BUCKETS = DepthBuckets((1, 2, 3, 5, 9, 17, 33))  # a wide 9-16 bucket: the case issue 16 measured
CHAIN = (0.95, 0.03, 0.03)  # depth-1 adherence, p_TF, p_FT: slow decay towards 0.5
DEPTH = 9
RULE, MODEL = "r", "m1"


def _chains(rng: np.random.Generator, n: int, depths: int) -> np.ndarray:
    """(n, depths) pass/fail states of independent conversations on CHAIN."""
    base, p_tf, p_ft = CHAIN
    out = np.empty((n, depths), dtype=bool)
    out[:, 0] = rng.random(n) < base
    for d in range(1, depths):
        u = rng.random(n)
        out[:, d] = np.where(out[:, d - 1], u >= p_tf, u < p_ft)
    return out


def production_counts(rng: np.random.Generator, conversations: int = 1500, max_depth: int = 40) -> Counts:
    """One model, one rule; geometric session lengths (mean 9); every turn checked."""
    lengths = np.minimum(rng.geometric(1 / 9, conversations), max_depth)
    states = _chains(rng, conversations, max_depth)
    alive = np.arange(1, max_depth + 1)[None, :] <= lengths[:, None]
    checks: Counter[CheckKey] = Counter()
    turns: Counter[TurnKey] = Counter()
    trans: Counter[TransitionKey] = Counter()
    for d in range(1, max_depth + 1):
        col, live = states[:, d - 1], alive[:, d - 1]
        bucket, prefix = BUCKETS.bucket(d), (NO_PREFIX if d == 1 else MODEL)
        passes = int((col & live).sum())
        checks[CheckKey(RULE, MODEL, prefix, bucket, "pass")] += passes
        checks[CheckKey(RULE, MODEL, prefix, bucket, "fail")] += int(live.sum()) - passes
        turns[TurnKey(MODEL, prefix, bucket, "false")] += int(live.sum())
        if d > 1:
            prev = states[:, d - 2]
            for a, fa in ((True, "pass"), (False, "fail")):
                for b, fb in ((True, "pass"), (False, "fail")):
                    trans[TransitionKey(RULE, MODEL, "false", fa, fb)] += int(
                        (live & (prev == a) & (col == b)).sum()
                    )
    return Counts(checks=dict(checks), transitions=dict(trans), turns=dict(turns))


def eval_result(rng: np.random.Generator, runs: int = 300) -> EvalResult:
    """``runs`` replays of a script with one checkpoint at DEPTH, on the same chain."""
    states = _chains(rng, runs, DEPTH)[:, -1]
    rows = [
        Row("s", MODEL, i, DEPTH, RULE, "pass" if ok else "fail", "", None, True, False, MODEL, 0)
        for i, ok in enumerate(states)
    ]
    return EvalResult(
        0.0, "mem", (MODEL,), (), tuple(adherence_curves(rows)), {}, authors={MODEL: {MODEL: runs}}
    )


def _replicates(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Raw p-values of the depth-matched comparison and of the naive bucket-vs-checkpoint one."""
    rng = np.random.default_rng(seed)
    matched, naive = [], []
    for _ in range(n):
        shapes = shapes_from_counts(production_counts(rng), source="null", buckets=BUCKETS)
        c = compare(shapes, [eval_result(rng)], min_gap=0.0)
        (row,) = c.rules
        assert (row.rule, row.model, row.depth, row.depth_bucket) == (RULE, MODEL, DEPTH, "9-16")
        matched.append(row.p_value)
        prod = shapes.shape(RULE, MODEL)
        i = shapes.buckets.index("9-16")
        naive.append(
            adjusted_one_sided_test(
                prod.passes[i], prod.n[i], round(row.eval_adherence * row.eval_n), row.eval_n
            )[1]  # type: ignore[union-attr]
        )
    return np.array(matched), np.array(naive)


def test_null_replicates_flag_at_the_nominal_rate_once_depths_are_matched() -> None:
    """150 null replicates: depth-matched p < 0.05 in 1.5–9% of them; the naive bucket comparison far more.

    Binomial sd of a 5% rate over 150 replicates is 1.8 pp, so [1.5%, 9%] is about ±2 sd
    (a little room below: the design effect of a whole bucket is an upper bound).
    """
    matched, naive = _replicates(150, seed=20)
    rate = float(np.mean(matched < 0.05))
    assert 0.015 <= rate <= 0.09, rate
    assert float(np.mean(naive < 0.05)) >= 0.25  # what the unmatched comparison did


@pytest.mark.slow
def test_null_calibration_over_many_replicates() -> None:
    """1000 replicates: the rate is within 3.5–6.5% and p-values are roughly uniform below 0.2."""
    matched, _ = _replicates(1000, seed=21)
    assert 0.035 <= float(np.mean(matched < 0.05)) <= 0.065
    assert 0.15 <= float(np.mean(matched < 0.2)) <= 0.25
