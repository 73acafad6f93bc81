"""Counts → dense arrays (rule × prefix × suffix × depth bucket) and Wilson intervals."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from handoffmon.counts import Counts
from handoffmon.depth import DepthBuckets
from handoffmon.types import NO_PREFIX, UNKNOWN_MODEL

HANDOFF_STATES: tuple[str, ...] = ("true", "false", "unknown")
"""Index order of the handoff axis of ``CellArrays.transitions``."""

_VERDICT_INDEX = {"pass": 0, "fail": 1}


@dataclass(frozen=True)
class CellArrays:
    """Dense pass/fail counts, the shape every estimator works on.

    Attributes:
        rules: rule names (sorted).
        models: known models (sorted): every suffix model and every prefix model
            except ``none`` and ``unknown``.
        prefixes: ``models`` followed by ``none`` and ``unknown``; index ``i < K`` of
            the prefix axis is the same model as index ``i`` of the suffix axis.
        buckets: depth bucket labels in depth order.
        passes: int array (R, K + 2, K, D) of pass verdicts.
        fails: int array (R, K + 2, K, D) of fail verdicts (not_applicable and error
            are excluded from adherence entirely).
        transitions: int array (R, K, 3, 2, 2): rule, model, handoff
            (``HANDOFF_STATES``), from (pass, fail), to (pass, fail).
    """

    rules: tuple[str, ...]
    models: tuple[str, ...]
    prefixes: tuple[str, ...]
    buckets: tuple[str, ...]
    passes: np.ndarray
    fails: np.ndarray
    transitions: np.ndarray

    @property
    def checked(self) -> np.ndarray:
        """pass + fail per cell."""
        return self.passes + self.fails

    @property
    def none_index(self) -> int:
        """Index of the ``none`` prefix (depth-1 turns)."""
        return len(self.models)

    @property
    def unknown_index(self) -> int:
        """Index of the ``unknown`` prefix."""
        return len(self.models) + 1


def build_cells(counts: Counts, buckets: DepthBuckets) -> CellArrays:
    """Turn ``counts`` into ``CellArrays``.

    Bucket labels are mapped through their lower bound into ``buckets``, so counts
    recorded with finer edges still land in the right (coarser) bucket.
    """
    check_keys = [k for k, v in counts.checks.items() if v and k.verdict in _VERDICT_INDEX]
    trans_keys = [
        k
        for k, v in counts.transitions.items()
        if v and k.from_verdict in _VERDICT_INDEX and k.to_verdict in _VERDICT_INDEX
    ]
    specials = {NO_PREFIX, UNKNOWN_MODEL}
    models = sorted(
        {k.model for k in check_keys} | {k.prefix_model for k in check_keys} | {k.model for k in trans_keys}
    )
    models = [m for m in models if m not in specials]
    rules = sorted({k.rule for k in check_keys} | {k.rule for k in trans_keys})
    labels = buckets.labels
    m_idx = {m: i for i, m in enumerate(models)}
    p_idx = {**m_idx, NO_PREFIX: len(models), UNKNOWN_MODEL: len(models) + 1}
    r_idx = {r: i for i, r in enumerate(rules)}
    b_idx = {lab: labels.index(buckets.bucket(DepthBuckets.lower_bound(lab))) for lab in _labels(check_keys)}
    shape = (len(rules), len(models) + 2, len(models), len(labels))
    pf = np.zeros((2, *shape), dtype=np.int64)
    for k in check_keys:
        if k.model in specials:
            continue
        at = (r_idx[k.rule], p_idx[k.prefix_model], m_idx[k.model], b_idx[k.depth_bucket])
        pf[(_VERDICT_INDEX[k.verdict], *at)] += counts.checks[k]
    trans = np.zeros((len(rules), len(models), len(HANDOFF_STATES), 2, 2), dtype=np.int64)
    h_idx = {h: i for i, h in enumerate(HANDOFF_STATES)}
    for t in trans_keys:
        if t.model in specials:
            continue
        h = h_idx.get(t.handoff, h_idx["unknown"])
        at = (r_idx[t.rule], m_idx[t.model], h, _VERDICT_INDEX[t.from_verdict], _VERDICT_INDEX[t.to_verdict])
        trans[at] += counts.transitions[t]
    return CellArrays(
        rules=tuple(rules),
        models=tuple(models),
        prefixes=(*models, NO_PREFIX, UNKNOWN_MODEL),
        buckets=labels,
        passes=pf[0],
        fails=pf[1],
        transitions=trans,
    )


def _labels(keys: list) -> set[str]:  # type: ignore[type-arg]
    return {k.depth_bucket for k in keys}


def wilson(x: np.ndarray, n: np.ndarray, z: float) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval for x successes out of n (NaN where n = 0).

    Chosen over the Wald interval because adherence is often near 1 and cells are
    small; Wilson keeps nominal coverage there and never leaves [0, 1].
    """
    x = np.asarray(x, dtype=float)
    n = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = x / n
        z2 = z * z
        denom = 1.0 + z2 / n
        center = (p + z2 / (2 * n)) / denom
        half = z * np.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    lo = np.where(n > 0, np.clip(center - half, 0.0, 1.0), np.nan)
    hi = np.where(n > 0, np.clip(center + half, 0.0, 1.0), np.nan)
    return lo, hi


def z_value(confidence: float) -> float:
    """Two-sided normal quantile for a confidence level (0.95 → 1.95996…)."""
    from scipy.special import ndtri

    return float(ndtri(0.5 + confidence / 2.0))
