"""Counts → sparse cell entries, capped model and rule lists, and dense arrays one rule at a time.

Memory stays bounded whatever clients send: check counts are kept as sparse entries
(one per counter key), models and rules beyond ``max_models`` / ``max_rules`` (ranked by
checked turns) are left out of the fit, and dense arrays are only ever built for one
rule at a time, (K + 2) × K × D with K ≤ ``max_models``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import TypeVar

import numpy as np

from handoffmon.counts import CELL_TOTAL, CLUSTER_STATS, POOLED_RULE, Counts
from handoffmon.depth import BUCKET_LABEL, DepthBuckets
from handoffmon.refit.intervals import wilson, z_value
from handoffmon.types import NO_PREFIX, UNKNOWN_MODEL

_Key = TypeVar("_Key", bound=tuple[str, ...])

__all__ = ["HANDOFF_STATES", "CellArrays", "ClusterSums", "RuleArrays", "build_cells", "wilson", "z_value"]

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
        cluster_sums: sparse cluster sums, one row per (rule index or R for pooled, prefix
            index, model index) with any: ``rule``, ``prefix``, ``model`` (E,) and ``sums``
            (E, 4) = (G, Σy², Σyn, Σn²); ``clusters`` gives them as a dict.
        transitions: int array (R, K, 3, 2, 2).
        clean_baseline: the counts carried clean-baseline checks (else every same-author
            turn is the baseline).
        clustered: the counts carried cluster sums, any of the four (else turns count as
            independent; a source whose ``conversations`` series alone went missing is still
            clustered, and ``refit.inputs`` checks its cells).
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
    cluster_sums: ClusterSums
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

    @property
    def clusters(self) -> dict[tuple[int, int, int], np.ndarray]:
        """{(rule index or R for pooled, prefix index, model index): (G, Σy², Σyn, Σn²)}."""
        c = self.cluster_sums
        keys = zip(c.rule.tolist(), c.prefix.tolist(), c.model.tolist(), strict=True)
        return {key: c.sums[i] for i, key in enumerate(keys)}

    def cluster_array(self, r: int) -> np.ndarray:
        """(K + 2, K, 4) cluster sums of rule index ``r`` (``len(rules)`` = pooled over rules)."""
        k = len(self.models)
        out = np.zeros((k + 2, k, len(CLUSTER_STATS)))
        c = self.cluster_sums
        sel = c.rule == r
        out[c.prefix[sel], c.model[sel]] = c.sums[sel]
        return out


@dataclass(frozen=True)
class ClusterSums:
    """Sparse per-cell cluster sums (see ``CellArrays.cluster_sums``)."""

    rule: np.ndarray
    prefix: np.ndarray
    model: np.ndarray
    sums: np.ndarray


def build_cells(
    counts: Counts, buckets: DepthBuckets, *, max_models: int = 200, max_rules: int = 100
) -> CellArrays:
    """Turn ``counts`` into ``CellArrays`` (bucket labels mapped through their lower bound,
    so counts recorded with finer edges still land in the right coarser bucket).

    Key columns come coded from ``_KeyCodes`` (cached between refits: a refit of a snapshot
    that holds the previous one's key objects in the same order codes only the new keys),
    totals per model and rule from ``np.bincount``.
    """
    with _CODES_LOCK:
        return _build_cells(_KEY_CODES.factors(), counts, buckets, max_models, max_rules)


def _build_cells(
    f: _Factors, counts: Counts, buckets: DepthBuckets, max_models: int, max_rules: int
) -> CellArrays:
    raw = f.table(counts.checks, "checks")
    keep = raw.verdict >= 0
    kept = np.where(keep, raw.values, 0.0)  # weights instead of masked copies of the columns
    model_tot = np.bincount(raw.model, kept, minlength=len(f.names)) + np.bincount(
        raw.prefix, kept, minlength=len(f.names)
    )
    rule_tot = np.bincount(raw.rule, kept, minlength=len(f.names))
    seen_rules = _present(raw.rule, keep)
    seen_models = _present(raw.model, keep) | _present(raw.prefix, keep)
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
    base = f.table(counts.baseline_checks, "baseline_checks")
    _check_bucket_labels(f, raw.bucket[keep], base.bucket[base.verdict >= 0])
    stat_codes = f.codes(counts.cell_stats, "cell_stats")
    stat_values = np.fromiter(counts.cell_stats.values(), dtype=np.float64, count=len(stat_codes))
    depth = f.depth_table(stat_codes, stat_values)
    _check_bucket_labels(f, depth.bucket[depth.bucket != f.code(CELL_TOTAL)])  # a whole-cell depth: ignored
    pooled_map = f.remap(rule_ids, {POOLED_RULE: len(rules)})
    return CellArrays(
        rules=rules,
        models=models,
        prefixes=(*models, NO_PREFIX, UNKNOWN_MODEL),
        buckets=buckets.labels,
        checks=_entries(raw, depth, maps, len(buckets.labels)),
        baseline=_entries(base, depth, (r_map, m_map, m_map, b_map), len(buckets.labels)),
        cluster_sums=_cluster_sums(f, stat_codes, stat_values, (pooled_map, p_map, m_map)),
        transitions=_transitions(counts, rules, models),
        clean_baseline=bool(np.any(base.verdict >= 0)),
        clustered=bool(np.any(np.isin(stat_codes[:, 4], [f.code(name) for name in CLUSTER_STATS]))),
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


@dataclass(frozen=True)
class _Coded:
    """One table's keys as last coded (the list of key objects) and their (n, 5) field codes."""

    keys: list[tuple[str, ...]]
    codes: np.ndarray


class _Factors:
    """One shared code space for every string of the counts (models, rules, buckets), and the
    coded key columns of the last table seen in each slot (``checks``, ``baseline_checks``,
    ``cell_stats``)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.factor = _Factor(self.names)
        self.coded: dict[str, _Coded] = {}

    def code(self, name: str) -> int:
        return int(self.factor[name])

    def specials(self) -> set[int]:
        return {self.code(s) for s in _SPECIALS}

    def codes(self, table: Mapping[_Key, int], slot: str) -> np.ndarray:
        """(n, 5) int32 codes of the keys of ``table``, in its order.

        When the keys are the keys this slot coded last time, or those followed by new ones
        (or their first part), the known part keeps its codes and only the rest is coded.
        The check is one list comparison in C: equal keys have equal fields, hence equal
        codes, and the aggregates' snapshots (dict copies, new keys last) hand over the same
        key objects in the same order, which compare by identity. Anything else (keys
        reordered or removed in between) is coded afresh.
        """
        keys: list[tuple[str, ...]] = list(table)
        n = len(keys)
        last = self.coded.get(slot)
        known = 0
        if last is not None:
            m = len(last.keys)
            if m == n and keys == last.keys:
                self.coded[slot] = _Coded(keys, last.codes)
                return last.codes
            if m < n and keys[:m] == last.keys:
                known = m
            elif n < m and keys == last.keys[:n]:
                known = n
        tail = self._code(keys[known:])
        codes = np.concatenate([last.codes[:known], tail]) if last is not None and known else tail
        self.coded[slot] = _Coded(keys, codes)
        return codes

    def _code(self, keys: Sequence[tuple[str, ...]]) -> np.ndarray:
        """Codes of every field of every key in one C-level pass over the flattened keys.

        All keys have five fields, so ``chain.from_iterable`` yields them field by field and
        one ``map`` of the shared dict's lookup codes them all (int32: the code space is the
        distinct strings, far below 2³¹). This is the floor of a cold coding, ~6·10⁶ field
        lookups at 1.2·10⁶ keys: a plain dict filled first, pandas' hash factorization of an
        object array, or codes by object address were no faster.
        """
        n = len(keys)
        return np.fromiter(
            map(self.factor.__getitem__, chain.from_iterable(keys)), dtype=np.int32, count=5 * n
        ).reshape(n, 5)

    def _raw(self, codes: np.ndarray, values: np.ndarray, verdict: np.ndarray | None = None) -> _Raw:
        if verdict is None:
            verdicts = {self.code(name): v for name, v in _VERDICT_INDEX.items()}
            lookup = np.full(len(self.names), -1, dtype=np.int8)
            lookup[list(verdicts)] = list(verdicts.values())
            verdict = lookup[codes[:, 4]]
        return _Raw(codes[:, 0], codes[:, 1], codes[:, 2], codes[:, 3], verdict, values)

    def table(self, table: Mapping[_Key, int], slot: str) -> _Raw:
        """The factorized columns of a five-field table (checks, baseline checks)."""
        codes = self.codes(table, slot)
        return self._raw(codes, np.fromiter(table.values(), dtype=np.float64, count=len(codes)))

    def depth_table(self, codes: np.ndarray, values: np.ndarray) -> _Raw:
        """The ``depth`` stats of the coded ``cell_stats`` as a table keyed like the checks (verdict pass)."""
        rows = codes[:, 4] == self.code("depth")
        return self._raw(codes[rows], values[rows], np.zeros(int(rows.sum()), dtype=np.int8))

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


class _KeyCodes:
    """The refit's persistent ``_Factors``, replaced by an empty one when its name space
    outgrows ``_NAMES_MAX`` (names from many unrelated sources), so memory stays bounded:
    the names, and per slot one table's key references and codes (~28 bytes per key)."""

    def __init__(self) -> None:
        self._factors = _Factors()

    def factors(self) -> _Factors:
        if len(self._factors.names) > _NAMES_MAX:
            self._factors = _Factors()
        return self._factors

    def clear(self) -> None:
        """Drop every cached name and coded table (the next refit codes its keys afresh)."""
        self._factors = _Factors()


_NAMES_MAX = 1 << 16
_KEY_CODES = _KeyCodes()
_CODES_LOCK = threading.Lock()


def _check_bucket_labels(f: _Factors, *columns: np.ndarray) -> None:
    """``InputError`` naming the first depth bucket label of checked turns that is not one
    (``abc``, ``0``, ``-3``): mapped through its lower bound it was dropped, or read as depth 1."""
    for column in columns:
        for code in np.flatnonzero(np.bincount(column)).tolist() if len(column) else ():
            label = f.names[code]
            if not BUCKET_LABEL.match(label):
                from handoffmon.errors import InputError

                raise InputError(
                    f"depth bucket {label[:80]!r} of checked turns is not a bucket label like 1, 3-4 or 97+"
                )


def _present(codes: np.ndarray, keep: np.ndarray) -> set[int]:
    """The distinct codes of a column's kept rows (a bincount, not a set of a million Python ints)."""
    return set(np.flatnonzero(np.bincount(codes, weights=keep)).tolist()) if len(codes) else set()


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


def _cluster_sums(
    f: _Factors, codes: np.ndarray, values: np.ndarray, maps: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> ClusterSums:
    """The whole-cell cluster sums (``CLUSTER_STATS`` at ``CELL_TOTAL``) of the coded ``cell_stats``
    of kept rules (and the pooled ``all``), prefixes and models, one row per cell."""
    stat_codes, total = [f.code(name) for name in CLUSTER_STATS], f.code(CELL_TOTAL)
    stat = np.full(len(f.names) + 1, -1, dtype=np.int64)
    stat[stat_codes] = np.arange(len(CLUSTER_STATS))
    size = len(stat) - 1
    pos = stat[np.minimum(codes[:, 4], size)]
    ok = (pos >= 0) & (codes[:, 3] == total)
    index = []
    for mp, column in zip(maps, (codes[:, 0], codes[:, 2], codes[:, 1]), strict=True):
        idx = mp[np.minimum(column, len(mp) - 1)]
        ok &= idx >= 0
        index.append(idx)
    r, p, m = (i[ok] for i in index)
    dims = (int(maps[0].max()) + 1, int(maps[1].max()) + 1, int(maps[2].max()) + 1)
    if not len(r) or min(dims) <= 0:
        empty = np.zeros(0, dtype=np.int64)
        return ClusterSums(empty, empty, empty, np.zeros((0, len(CLUSTER_STATS))))
    flat = np.ravel_multi_index((r, p, m), dims)
    cells, inverse = np.unique(flat, return_inverse=True)
    sums = np.zeros((len(cells), len(CLUSTER_STATS)))
    np.add.at(sums, (inverse, pos[ok]), values[ok])
    rr, pp, mm = np.unravel_index(cells, dims)
    return ClusterSums(rr, pp, mm, sums)


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
