"""Counts → dense arrays (rule × prefix × suffix × depth bucket) and Wilson intervals."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from handoffmon.counts import Counts
from handoffmon.depth import DepthBuckets
from handoffmon.types import NO_PREFIX, UNKNOWN_MODEL

HANDOFF_STATES: tuple[str, ...] = ("true", "false", "unknown")
"""Index order of the handoff axis of ``CellArrays.transitions``."""

_VERDICT_INDEX = {"pass": 0, "fail": 1}
_SPECIALS = frozenset({NO_PREFIX, UNKNOWN_MODEL})
"""Prefix values that are not models."""


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
        return np.asarray(self.passes + self.fails)

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
    checks, trans_keys = counts.checks, counts.transitions
    models = sorted((_distinct(checks, 1) | _distinct(checks, 2) | _distinct(trans_keys, 1)) - _SPECIALS)
    rules = sorted(_distinct(checks, 0) | _distinct(trans_keys, 0))
    labels = buckets.labels
    k, r, d = len(models), len(rules), len(labels)
    # Specials and other verdicts get their own trailing slots, sliced off below: the
    # whole mapping then runs in C (map over dict lookups) instead of a Python loop.
    m_idx = _Index({m: i for i, m in enumerate(models)}, default=k)
    p_idx = _Index({**m_idx, NO_PREFIX: k, UNKNOWN_MODEL: k + 1}, default=k + 1)
    r_idx = {name: i for i, name in enumerate(rules)}
    b_idx = {lab: labels.index(buckets.bucket(DepthBuckets.lower_bound(lab))) for lab in _distinct(checks, 3)}
    h_idx = _Index({h: i for i, h in enumerate(HANDOFF_STATES)}, default=HANDOFF_STATES.index("unknown"))
    v_idx = _Index(_VERDICT_INDEX, default=2)
    pf = _scatter(
        (3, r, k + 2, k + 1, d),
        [v_idx, r_idx, p_idx, m_idx, b_idx],
        [_column(checks, i) for i in (4, 0, 2, 1, 3)],
        checks.values(),
    )[:2, :, :, :k]
    trans = _scatter(
        (r, k + 1, len(HANDOFF_STATES), 3, 3),
        [r_idx, m_idx, h_idx, v_idx, v_idx],
        [_column(trans_keys, i) for i in range(5)],
        trans_keys.values(),
    )[:, :k, :, :2, :2]
    return CellArrays(
        rules=tuple(rules),
        models=tuple(models),
        prefixes=(*models, NO_PREFIX, UNKNOWN_MODEL),
        buckets=labels,
        passes=pf[0],
        fails=pf[1],
        transitions=trans,
    )


def _column(keys: Iterable[tuple[str, ...]], i: int) -> Iterator[str]:
    """Lazy i-th field of every key. Lazy on purpose: materializing 10⁵-element tuples
    (``zip(*keys)``) triggers repeated garbage-collector passes and cost 5× more."""
    return map(itemgetter(i), keys)


def _distinct(keys: Iterable[tuple[str, ...]], i: int) -> set[str]:
    return set(_column(keys, i))


class _Index(dict):  # type: ignore[type-arg]
    """Label → index, with ``default`` for anything not listed."""

    def __init__(self, mapping: Mapping[str, int], *, default: int) -> None:
        super().__init__(mapping)
        self.default = default

    def __missing__(self, key: str) -> int:
        return self.default


def _scatter(
    shape: tuple[int, ...],
    lookups: list[Mapping[str, int]],
    columns: list[Iterator[str]],
    values: Iterable[int],
) -> np.ndarray:
    """Sum ``values`` into a zero array of ``shape`` at the looked-up indices (vectorized)."""
    size = int(np.prod(shape))
    weights = np.fromiter(values, dtype=np.float64)
    if not weights.size:
        return np.zeros(shape, dtype=np.int64)
    index = tuple(
        np.fromiter(map(lk.__getitem__, col), dtype=np.int64)
        for lk, col in zip(lookups, columns, strict=True)
    )
    flat = np.ravel_multi_index(index, shape)
    summed = np.bincount(flat, weights=weights, minlength=size)
    return np.rint(summed).astype(np.int64).reshape(shape)


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
