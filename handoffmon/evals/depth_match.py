"""Production adherence at one depth, read off bucketed production counts.

Production reports adherence per depth bucket (9–16 pools depths 9 … 16), while an eval
checkpoint sits at one depth. Where adherence decays, the bucket mean lies below its
first depth, so comparing a checkpoint at depth 9 with the 9–16 bucket calls an
identical chain "too clean" about half the time. The bucket estimate is therefore moved
to the checkpoint's depth by production's own Markov-implied curve
a(d+1) = a(d)(1 − p_TF) + (1 − a(d)) p_FT (started at production's depth-1 adherence):

    production(d) = bucket adherence + a(d) − Σ_k w_k a(k) / Σ_k w_k   over the bucket's depths k,

with w_k the production turns at depth k (interpolated log-linearly between bucket
centres, since conversations thin out with depth). The shift is exact when the chain
holds and zero for single-depth buckets.

Turns of one conversation inside a bucket are dependent (the same chain), so the
bucket's binomial variance is inflated by the chain's design effect for a run of k
consecutive turns, 1 + 2 Σ_{j<k} (1 − j/k) ρ^j with lag-one correlation
ρ = 1 − p_TF − p_FT, k being the turns a conversation that reaches the bucket spends
in it (Σ w / w at the bucket's first depth).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from handoffmon.depth import DepthBuckets


@dataclass(frozen=True)
class AtDepth:
    """Production adherence moved to one depth.

    Attributes:
        adherence: the estimate at the depth (NaN when the bucket is empty).
        shift: the within-bucket adjustment added to the bucket's adherence.
        design_effect: variance inflation of the bucket estimate.
        matched: the depth was matched (single-depth bucket, or a Markov fit was available).
    """

    adherence: float
    shift: float
    design_effect: float
    matched: bool


def bucket_depths(buckets: DepthBuckets, label: str) -> range:
    """Depths of a bucket; the open last bucket ``lo+`` is taken as lo … 2·lo − 1."""
    i = buckets.index(label)
    lo = buckets.edges[i]
    hi = buckets.edges[i + 1] - 1 if i + 1 < len(buckets.edges) else 2 * lo - 1
    return range(lo, hi + 1)


def markov_curve(initial: float, p_tf: float, p_ft: float, max_depth: int) -> list[float]:
    """a(1) … a(max_depth) of the two-state chain started at ``initial``."""
    out, a = [], initial
    for _ in range(max_depth):
        out.append(a)
        a = a * (1.0 - p_tf) + (1.0 - a) * p_ft
    return out


def design_effect(p_tf: float, p_ft: float, run_length: int) -> float:
    """Variance inflation of the mean of ``run_length`` consecutive checks of one chain."""
    rho = min(max(1.0 - p_tf - p_ft, 0.0), 0.99)
    k = max(run_length, 1)
    return 1.0 + 2.0 * sum((1.0 - j / k) * rho**j for j in range(1, k))


def depth_weights(buckets: DepthBuckets, n: tuple[int, ...], label: str) -> dict[int, float]:
    """Relative production turns at each depth of a bucket.

    Per-depth turn rates n_b / width_b sit at bucket centres; between the centres around
    the bucket they are interpolated log-linearly (flat where a neighbour is missing).
    """
    labels = buckets.labels
    centres = [sum(bucket_depths(buckets, b)) / len(bucket_depths(buckets, b)) for b in labels]
    rates = [n[i] / len(bucket_depths(buckets, b)) for i, b in enumerate(labels)]
    i = labels.index(label)
    out = {}
    for d in bucket_depths(buckets, label):
        j = i + 1 if d >= centres[i] else i - 1
        if not 0 <= j < len(labels) or rates[j] <= 0 or rates[i] <= 0:
            out[d] = 1.0
            continue
        slope = (math.log(rates[j]) - math.log(rates[i])) / (centres[j] - centres[i])
        out[d] = math.exp(slope * (d - centres[i]))
    return out


def production_at_depth(
    buckets: DepthBuckets,
    n: tuple[int, ...],
    adherence: tuple[float | None, ...],
    depth: int,
    markov: dict[str, float | None],
) -> AtDepth:
    """Production adherence at ``depth`` from a rule's per-bucket ``n`` and ``adherence``.

    ``markov`` needs ``p_tf`` and ``p_ft``; without them a multi-depth bucket is returned
    unshifted with ``matched`` False, unless its adherence is 0 or 1 (then it is the
    adherence at every depth of the bucket: shift 0, matched).
    """
    label = buckets.bucket(depth)
    i = buckets.index(label)
    raw = adherence[i]
    width = len(bucket_depths(buckets, label))
    if raw is None or n[i] == 0:
        return AtDepth(math.nan, 0.0, 1.0, False)
    if raw in (0.0, 1.0):
        # every check of the bucket failed (or passed), so did every depth in it: shift 0 is exact,
        # with or without a Markov fit (which is undefined when a state is never visited)
        return AtDepth(raw, 0.0, 1.0, True)
    p_tf, p_ft = markov.get("p_tf"), markov.get("p_ft")
    if p_tf is None or p_ft is None or not (math.isfinite(p_tf) and math.isfinite(p_ft)):
        return AtDepth(raw, 0.0, 1.0, width == 1)
    start = adherence[0] if adherence[0] is not None else raw
    depths = bucket_depths(buckets, label)
    curve = markov_curve(start, p_tf, p_ft, max(depths[-1], depth))
    weights = depth_weights(buckets, n, label)
    mean = sum(w * curve[d - 1] for d, w in weights.items()) / sum(weights.values())
    shift = curve[depth - 1] - mean
    run = sum(weights.values()) / weights[depths[0]]  # turns per conversation that reaches the bucket
    return AtDepth(raw + shift, shift, design_effect(p_tf, p_ft, round(run)), True)
