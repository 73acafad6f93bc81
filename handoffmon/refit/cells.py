"""Counts → sparse cell entries, capped model and rule lists, and dense arrays one rule at a time.

Memory stays bounded whatever clients send: check counts are kept as sparse entries
(one per counter key), models and rules beyond ``max_models`` / ``max_rules`` (ranked by
checked turns) are left out of the fit, and dense arrays are only ever built for one
rule at a time, (K + 2) × K × D with K ≤ ``max_models``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import chain
from typing import TypeVar

import numpy as np

from handoffmon.counts import CELL_TOTAL, CLUSTER_STATS, POOLED_RULE, Counts
from handoffmon.depth import DepthBuckets
from handoffmon.refit.intervals import wilson, z_value
from handoffmon.types import NO_PREFIX, UNKNOWN_MODEL

_Key = TypeVar("_Key", bound=tuple[str, ...])

__all__ = ["HANDOFF_STATES", "CellArrays", "RuleArrays", "build_cells", "wilson", "z_value"]

HANDOFF_STATES: tuple[str, ...] = ("true", "false", "unknown")
"""Index order of the handoff axis of ``CellArrays.transitions``."""

_VERDICT_INDEX = {"pass": 0, "fail": 1}
_SPECIALS = frozenset({NO_PREFIX, UNKNOWN_MODEL})
_DENSE_CELLS_MAX = 1 << 21
_DENSE_PER_KEY = 4
"""Cell spaces up to this size (or 4× the keys) are summed in dense bins (3 float64 arrays of
at most 16 MB; K = 100 models × 10 rules × 7 buckets is ~0.9·10⁶ cells), else via a sort."""
"""Prefix values that are not models."""


@dataclass(frozen=True)
class Entries:
    """Sparse per-cell columns (one entry per (rule, prefix, model, bucket)), all shape (E,)."""

    rule: np.ndarray
    prefix: np.ndarray
    model: np.ndarray
    bucket: np.ndarray
    passes: np.ndarray
    fails: np.ndarray
    depth: np.ndarray

    def select(self, mask: np.ndarray) -> Entries:
        return Entries(*(getattr(self, f)[mask] for f in self.__dataclass_fields__))


@dataclass(frozen=True)
class RuleArrays:
    """Dense arrays of one rule (or of one rule's share of a pooled fit).

    Attributes:
        passes: (K + 2, K, D) pass verdicts [prefix, model, bucket], every same-author turn
            on the diagonal.
        fails: same shape.
        depth: (K + 2, K, D) Σ depth of checked turns (0 when the source has none).
        base_passes: (K, D) the clean B→B baseline's passes.
        base_fails: (K, D).
        base_depth: (K, D) Σ depth of the baseline's checked turns.
        clusters: (K + 2, K, 4) G, Σy², Σyn, Σn² per cell (diagonal = clean baseline).
        transitions: (K, 3, 2, 2) [model, handoff state, from, to].
    """

    passes: np.ndarray
    fails: np.ndarray
    depth: np.ndarray
    base_passes: np.ndarray
    base_fails: np.ndarray
    base_depth: np.ndarray
    clusters: np.ndarray
    transitions: np.ndarray


@dataclass(frozen=True)
class CellArrays:
    """Everything the refit reads, sparse where it could grow with K².

    Attributes:
        rules: rule names (sorted), at most ``max_rules``.
        models: models in the fit (sorted), at most ``max_models``.
        prefixes: ``models`` followed by ``none`` and ``unknown``.
        buckets: depth bucket labels in depth order.
        checks: sparse check entries (``Entries``).
        baseline: sparse entries of the clean baseline (prefix = model).
        clusters: {(rule index or R for pooled, prefix index, model index): (G, Σy², Σyn, Σn²)}.
        transitions: int array (R, K, 3, 2, 2).
        clean_baseline: the counts carried clean-baseline checks (else every same-author
            turn is the baseline).
        clustered: the counts carried cluster sums (else turns count as independent).
        depth_sums: the counts carried per-bucket depth sums (else no within-bucket adjustment).
        excluded_models: models left out because of ``max_models``.
        excluded_rules: rules left out because of ``max_rules``.
    """

    rules: tuple[str, ...]
    models: tuple[str, ...]
    prefixes: tuple[str, ...]
    buckets: tuple[str, ...]
    checks: Entries
    baseline: Entries
    clusters: dict[tuple[int, int, int], np.ndarray]
    transitions: np.ndarray
    clean_baseline: bool
    clustered: bool
    depth_sums: bool
    excluded_models: tuple[str, ...] = ()
    excluded_rules: tuple[str, ...] = ()

    @property
    def none_index(self) -> int:
        """Index of the ``none`` prefix (depth-1 turns)."""
        return len(self.models)

    def rule_arrays(self, r: int) -> RuleArrays:
        """Dense arrays of rule ``r`` ((K + 2) × K × D, bounded by the model cap)."""
        k, d = len(self.models), len(self.buckets)
        e = self.checks.select(self.checks.rule == r)
        shape = (k + 2, k, d)
        flat = np.ravel_multi_index((e.prefix, e.model, e.bucket), shape)
        size = int(np.prod(shape))
        passes, fails, depth = (
            np.bincount(flat, weights=w, minlength=size).reshape(shape) for w in (e.passes, e.fails, e.depth)
        )
        if self.clean_baseline:
            b = self.baseline.select(self.baseline.rule == r)
            bflat = np.ravel_multi_index((b.model, b.bucket), (k, d))
            bp, bf, bd = (
                np.bincount(bflat, weights=w, minlength=k * d).reshape(k, d)
                for w in (b.passes, b.fails, b.depth)
            )
        else:
            diag = np.arange(k)
            bp, bf, bd = passes[diag, diag], fails[diag, diag], depth[diag, diag]
        return RuleArrays(passes, fails, depth, bp, bf, bd, self.cluster_array(r), self.transitions[r])

    def cluster_array(self, r: int) -> np.ndarray:
        """(K + 2, K, 4) cluster sums of rule index ``r`` (``len(rules)`` = pooled over rules)."""
        k = len(self.models)
        out = np.zeros((k + 2, k, len(CLUSTER_STATS)))
        for (rr, p, m), v in self.clusters.items():
            if rr == r:
                out[p, m] = v
        return out


def build_cells(
    counts: Counts, buckets: DepthBuckets, *, max_models: int = 200, max_rules: int = 100
) -> CellArrays:
    """Turn ``counts`` into ``CellArrays`` (bucket labels mapped through their lower bound,
    so counts recorded with finer edges still land in the right coarser bucket).

    Each key column is factorized in one C-level pass (``_Factor``), totals per model and
    rule come from ``np.bincount``; a 10⁶-key snapshot converts in a few tenths of a second.
    """
    f = _Factors()
    raw = f.table(counts.checks)
    keep = raw.verdict >= 0
    model_tot = np.bincount(raw.model[keep], raw.values[keep], minlength=len(f.names)) + np.bincount(
        raw.prefix[keep], raw.values[keep], minlength=len(f.names)
    )
    rule_tot = np.bincount(raw.rule[keep], raw.values[keep], minlength=len(f.names))
    seen_rules = _present(raw.rule[keep])
    seen_models = _present(raw.model[keep]) | _present(raw.prefix[keep])
    seen_models |= {f.code(t.model) for t in counts.transitions}
    model_ids = _top(f, seen_models - f.specials(), model_tot, max_models)
    trans_rules = {f.code(t.rule) for t in counts.transitions}
    rule_ids = _top(f, seen_rules | trans_rules, rule_tot, max_rules)
    models = tuple(f.names[i] for i in model_ids)
    rules = tuple(f.names[i] for i in rule_ids)
    if POOLED_RULE in rules:
        from handoffmon.errors import InputError

        raise InputError(
            f"rule name {POOLED_RULE!r} is reserved for the fit pooled over rules; rename the rule"
        )
    k = len(models)
    m_map = f.remap(model_ids)
    p_map = f.remap(model_ids, {NO_PREFIX: k, UNKNOWN_MODEL: k + 1})
    r_map = f.remap(rule_ids)
    b_map = f.remap_buckets(buckets)
    maps = (r_map, p_map, m_map, b_map)
    depth = f.table(
        {
            (s.rule, s.model, s.prefix_model, s.depth_bucket, "pass"): v
            for s, v in counts.cell_stats.items()
            if s.stat == "depth"
        }
    )
    base = f.table(counts.baseline_checks)
    return CellArrays(
        rules=rules,
        models=models,
        prefixes=(*models, NO_PREFIX, UNKNOWN_MODEL),
        buckets=buckets.labels,
        checks=_entries(raw, depth, maps, len(buckets.labels)),
        baseline=_entries(base, depth, (r_map, m_map, m_map, b_map), len(buckets.labels)),
        clusters=_clusters(counts, {**{r: i for i, r in enumerate(rules)}, POOLED_RULE: len(rules)}, models),
        transitions=_transitions(counts, rules, models),
        clean_baseline=bool(np.any(base.verdict >= 0)),
        clustered=any(s.stat == "conversations" for s in counts.cell_stats),
        depth_sums=bool(len(depth.values)),
        excluded_models=tuple(sorted(f.names[i] for i in seen_models - set(model_ids) - f.specials())),
        excluded_rules=tuple(sorted(f.names[i] for i in seen_rules - set(rule_ids))),
    )


@dataclass(frozen=True)
class _Raw:
    """Factorized columns of a counts table (codes into ``_Factors.names``)."""

    rule: np.ndarray
    model: np.ndarray
    prefix: np.ndarray
    bucket: np.ndarray
    verdict: np.ndarray  # 0 pass, 1 fail, −1 other
    values: np.ndarray


class _Factor(dict):  # type: ignore[type-arg]
    """String → code, assigning the next code to a string seen for the first time."""

    def __init__(self, names: list[str]) -> None:
        super().__init__()
        self.names = names

    def __missing__(self, key: str) -> int:
        code = self[key] = len(self.names)
        self.names.append(key)
        return code


class _Factors:
    """One shared code space for every string of the counts (models, rules, buckets)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.factor = _Factor(self.names)

    def code(self, name: str) -> int:
        return int(self.factor[name])

    def specials(self) -> set[int]:
        return {self.code(s) for s in _SPECIALS}

    def table(self, table: Mapping[_Key, int]) -> _Raw:
        """Codes of every field of every key in one C-level pass over the flattened keys.

        All keys have five fields, so ``chain.from_iterable`` yields them field by field and
        one ``map`` of the shared dict's lookup codes them all (int32: the code space is the
        distinct strings, far below 2³¹); each field is then a strided view, no copies.
        The keys are read straight from the mapping (no list of 10⁶ keys first: ~10 % less).
        The floor is the ~6·10⁶ field lookups themselves: a plain dict filled first, pandas'
        hash factorization of an object array, or codes by object address were no faster.
        """
        n = len(table)
        values = np.fromiter(table.values(), dtype=np.float64, count=n)
        codes = np.fromiter(
            map(self.factor.__getitem__, chain.from_iterable(table)), dtype=np.int32, count=5 * n
        ).reshape(n, 5)
        verdicts = {self.code(name): v for name, v in _VERDICT_INDEX.items()}
        lookup = np.full(len(self.names), -1, dtype=np.int8)
        lookup[list(verdicts)] = list(verdicts.values())
        return _Raw(codes[:, 0], codes[:, 1], codes[:, 2], codes[:, 3], lookup[codes[:, 4]], values)

    def remap(self, ids: list[int], extra: Mapping[str, int] | None = None) -> np.ndarray:
        """Code → position in ``ids`` (then ``extra`` names), −1 elsewhere; covers later codes too."""
        for name in extra or {}:
            self.code(name)
        out = np.full(len(self.names) + 1, -1, dtype=np.int64)
        out[np.asarray(ids, dtype=np.int64)] = np.arange(len(ids))
        for name, pos in (extra or {}).items():
            out[self.code(name)] = pos
        return out

    def remap_buckets(self, buckets: DepthBuckets) -> np.ndarray:
        labels = buckets.labels
        out = np.full(len(self.names) + 1, -1, dtype=np.int64)
        for code, name in enumerate(self.names):
            try:
                out[code] = labels.index(buckets.bucket(DepthBuckets.lower_bound(name)))
            except ValueError:
                continue
        return out


def _present(codes: np.ndarray) -> set[int]:
    """The distinct codes of a column (a bincount, not a set of a million Python ints)."""
    return set(np.flatnonzero(np.bincount(codes)).tolist()) if len(codes) else set()


def _top(f: _Factors, ids: set[int], totals: np.ndarray, cap: int) -> list[int]:
    """Codes of the ``cap`` names with the largest totals (ties by name), sorted by name."""
    tot = np.concatenate([totals, np.zeros(max(0, len(f.names) - len(totals)))])
    chosen = sorted(ids, key=lambda i: (-tot[i], f.names[i]))[:cap]
    return sorted(chosen, key=lambda i: f.names[i])


def _entries(raw: _Raw, depth: _Raw, maps: tuple[np.ndarray, ...], n_buckets: int) -> Entries:
    """One entry per cell (pass and fail keys of a cell summed), with its depth sum."""
    r_map, p_map, m_map, _ = maps
    shape = (int(r_map.max()) + 2, int(p_map.max()) + 2, int(m_map.max()) + 2, n_buckets)

    def flat(t: _Raw) -> tuple[np.ndarray, np.ndarray]:
        """Flat cell index of the keys that land in a kept cell, and which keys those are."""
        idx = np.zeros(len(t.values), dtype=np.int64)
        ok = t.verdict >= 0
        for mp, c, size in zip(maps, (t.rule, t.prefix, t.model, t.bucket), shape, strict=True):
            code = mp[np.minimum(c, len(mp) - 1)]
            ok &= code >= 0
            idx *= size
            idx += code
        return idx[ok], ok

    f_idx, ok = flat(raw)
    verdict, values = raw.verdict[ok], raw.values[ok]
    pass_w, fail_w = np.where(verdict == 0, values, 0.0), np.where(verdict == 1, values, 0.0)
    space = math.prod(shape)
    if space <= _DENSE_CELLS_MAX or space <= _DENSE_PER_KEY * len(f_idx):
        # bins over the whole (small) cell space: linear, no sort of 10⁶ indices (np.unique's
        # argsort); the same cells (those with a key) and the same sums, added in key order
        cells = np.flatnonzero(np.bincount(f_idx, minlength=space))
        passes = np.bincount(f_idx, weights=pass_w, minlength=space)[cells]
        fails = np.bincount(f_idx, weights=fail_w, minlength=space)[cells]
    else:
        cells, inverse = np.unique(f_idx, return_inverse=True)
        passes = np.bincount(inverse, weights=pass_w, minlength=len(cells))
        fails = np.bincount(inverse, weights=fail_w, minlength=len(cells))
    depth_sum = np.zeros(len(cells))
    if len(depth.values) and len(cells):
        d_flat, d_ok = flat(depth)
        d_val = depth.values[d_ok]
        pos = np.searchsorted(cells, d_flat)
        hit = (pos < len(cells)) & (cells[np.minimum(pos, len(cells) - 1)] == d_flat)
        np.add.at(depth_sum, pos[hit], d_val[hit])
    r, p, m, b = np.unravel_index(cells, shape)
    return Entries(r, p, m, b, passes, fails, depth_sum)


def _clusters(
    counts: Counts, r_idx: Mapping[str, int], models: tuple[str, ...]
) -> dict[tuple[int, int, int], np.ndarray]:
    k = len(models)
    m_idx = {m: i for i, m in enumerate(models)}
    p_idx = {**m_idx, NO_PREFIX: k, UNKNOWN_MODEL: k + 1}
    out: dict[tuple[int, int, int], np.ndarray] = {}
    pos = {s: i for i, s in enumerate(CLUSTER_STATS)}
    for s, v in counts.cell_stats.items():
        if s.stat not in pos or s.depth_bucket != CELL_TOTAL:
            continue
        key = (r_idx.get(s.rule, -1), p_idx.get(s.prefix_model, -1), m_idx.get(s.model, -1))
        if min(key) < 0:
            continue
        out.setdefault(key, np.zeros(len(CLUSTER_STATS)))[pos[s.stat]] += v
    return out


def _transitions(counts: Counts, rules: tuple[str, ...], models: tuple[str, ...]) -> np.ndarray:
    r_idx = {r: i for i, r in enumerate(rules)}
    m_idx = {m: i for i, m in enumerate(models)}
    out = np.zeros((len(rules), len(models), len(HANDOFF_STATES), 2, 2), dtype=np.int64)
    h_idx = {h: i for i, h in enumerate(HANDOFF_STATES)}
    for t, v in counts.transitions.items():
        ri, mi = r_idx.get(t.rule, -1), m_idx.get(t.model, -1)
        fi, ti = _VERDICT_INDEX.get(t.from_verdict, -1), _VERDICT_INDEX.get(t.to_verdict, -1)
        if min(ri, mi, fi, ti) >= 0:
            out[ri, mi, h_idx.get(t.handoff, 2), fi, ti] += v
    return out
