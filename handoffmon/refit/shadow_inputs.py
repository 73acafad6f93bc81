"""The refit's input check of shadow pairs: each pair cell's conversation-cluster sums against its table.

Per (rule, A, B), over conversations c with n_c pairs of which b_c only B passed and c_c only A
(b_c + c_c ≤ n_c; N = Σn_c the table's pairs, B = Σb_c ``model_only``, C = Σc_c ``prefix_only``),
the sums G, Σb², Σc², Σbc, Σbn, Σcn, Σn² (``counts.SHADOW_CLUSTER``) obey, whatever the
conversations: every sum ≥ 0, B ≤ Σb² ≤ Σbn, C ≤ Σc² ≤ Σcn, Σb² + 2Σbc + Σc² ≤ Σbn + Σcn
(Σ(b + c)² ≤ Σ(b + c)n), Σbn + Σcn ≤ Σn², N ≤ Σn² ≤ N², Σb² ≤ B², Σc² ≤ C², Σbn ≤ BN, Σcn ≤ CN,
Σbc ≤ BC, Σbc² ≤ Σb²·Σc², 1 ≤ G ≤ N (a cell with pairs), B² ≤ G·Σb², C² ≤ G·Σc² and
N² ≤ G·Σn² (Cauchy–Schwarz). A lost ``conversations`` series reads as independent pairs
(design effect 1), a lost ``b2`` or an inflated ``bc`` as less discordance within conversations:
switch-cost intervals narrower than the pairs allow.

The policy is the cells' (``refit.inputs``): an exact source is refused naming the pair cell and
the relation beyond the same hair of slack; an approximate one is checked with its tolerance and
a cell beyond it is read as one conversation holding all its pairs (design effect N, one degree
of freedom; only G too large: G ignored) and listed in ``RefitResult.shadow_input_repairs``. Over
a window only the relations increments obey are checked: the first six chains and N ≤ Σn² hold
for a straddling conversation's increments too ((b₀ + δb)² − b₀² ≥ δb, and so on), the bounds
by N², B², BC and G do not; and only cells with at least ``refit.min_n`` pairs (``min_pairs``).
"""

from __future__ import annotations

import numpy as np

from handoffmon.counts import SHADOW_CLUSTER, SHADOW_STATS, SHADOW_TABLE
from handoffmon.errors import InputError
from handoffmon.refit.inputs import (
    CONVERSATIONS_DROPPED,
    MAX_LISTED,
    ONE_CONVERSATION,
    Checked,
    Relation,
    Values,
    broken_relations,
    triage,
)
from handoffmon.refit.result import ShadowInputRepair

Pair = tuple[str, str]
ShadowCells = dict[str, dict[Pair, np.ndarray]]
"""``switch_costs.shadow_cells``: {rule: {(A, B): stats in ``SHADOW_STATS`` order}}."""

_POS = {s: i for i, s in enumerate(SHADOW_STATS)}
_TABLE = [_POS[s] for s in SHADOW_TABLE]
_SUMS = ("g", "b2", "c2", "bc", "bn", "cn", "n2")
"""Keys of the cluster sums in ``Values``, in ``SHADOW_CLUSTER`` order."""
_G_BOUND = "conversations <= pairs"
_NO_SLACK = frozenset({*(f"{s} >= 0" for s in ("conversations", *SHADOW_CLUSTER[1:])), "conversations >= 1"})
"""Relations checked without tolerance: a sign or a missing series is no rounding."""


def _zero(v: Values) -> np.ndarray:
    return 0 * v["g"]


def _sign(key: str) -> Relation:
    return (f"{'conversations' if key == 'g' else key} >= 0", lambda v: -v[key], _zero, True, False)


_RELATIONS: tuple[Relation, ...] = (
    # (name, lhs, rhs, holds for windowed increments, needs the table: always known here)
    *(_sign(k) for k in _SUMS),
    ("model_only <= b2", lambda v: v["b"], lambda v: v["b2"], True, False),
    ("prefix_only <= c2", lambda v: v["c"], lambda v: v["c2"], True, False),
    ("b2 <= bn", lambda v: v["b2"], lambda v: v["bn"], True, False),
    ("c2 <= cn", lambda v: v["c2"], lambda v: v["cn"], True, False),
    ("b2 + 2bc + c2 <= bn + cn", lambda v: v["b2"] + 2 * v["bc"] + v["c2"], lambda v: v["bn"] + v["cn"],
     True, False),
    ("bn + cn <= n2", lambda v: v["bn"] + v["cn"], lambda v: v["n2"], True, False),
    ("pairs <= n2", lambda v: v["n"], lambda v: v["n2"], True, False),
    # G <= N holds for increments too; not checked over a window, as for the cells (``inputs``)
    (_G_BOUND, lambda v: v["g"], lambda v: v["n"], False, False),
    ("conversations >= 1", lambda v: np.minimum(v["n"], 1.0), lambda v: v["g"], False, False),
    ("n2 <= pairs^2", lambda v: v["n2"], lambda v: v["n"] ** 2, False, False),
    ("b2 <= model_only^2", lambda v: v["b2"], lambda v: v["b"] ** 2, False, False),
    ("c2 <= prefix_only^2", lambda v: v["c2"], lambda v: v["c"] ** 2, False, False),
    ("bn <= model_only*pairs", lambda v: v["bn"], lambda v: v["b"] * v["n"], False, False),
    ("cn <= prefix_only*pairs", lambda v: v["cn"], lambda v: v["c"] * v["n"], False, False),
    ("bc <= model_only*prefix_only", lambda v: v["bc"], lambda v: v["b"] * v["c"], False, False),
    ("bc^2 <= b2*c2", lambda v: v["bc"] ** 2, lambda v: v["b2"] * v["c2"], False, False),
    ("model_only^2 <= conversations*b2", lambda v: v["b"] ** 2, lambda v: v["g"] * v["b2"], False, False),
    ("prefix_only^2 <= conversations*c2", lambda v: v["c"] ** 2, lambda v: v["g"] * v["c2"], False, False),
    ("pairs^2 <= conversations*n2", lambda v: v["n"] ** 2, lambda v: v["g"] * v["n2"], False, False),
)  # fmt: skip


def check_shadow(
    cells: ShadowCells, *, source: str, exact: bool, windowed: bool, min_pairs: int = 0, repair: bool = False
) -> Checked[ShadowCells, ShadowInputRepair]:
    """Check every shadow pair cell's cluster sums against each other and its paired table.

    Args:
        cells: ``switch_costs.shadow_cells`` of the counts (``all`` included).
        source: the source's label, named in errors.
        exact: totals at rest: a violated relation (beyond ``inputs.EXACT_REL_TOLERANCE`` and
            ``EXACT_ABS_TOLERANCE``; a sign or a missing G at once) is an error. Otherwise
            violations beyond the tolerance are repaired and reported.
        windowed: the counts are increases over a window (only relations increments obey).
        repair: with ``exact``, violations are repaired and reported instead of refused (a SQLite
            file a crash tore: ``refit.inputs``).
        min_pairs: over a window, cells with fewer pairs (``refit.min_n``: no switch cost is
            estimated for them, so none can be too narrow) are not checked. A small cell's
            series are born in the window: read with ``increase``, whose per-series reset
            detection missed a restart where the new count reached the old one by the first
            scrape, a healthy 12 s window across a restart (real Prometheus) read one pooled
            cell of 8 pairs with Σbn + Σcn = 11 beside Σn² = 0 (the source now shares one reset
            per scraped process: ``sources.prometheus.window_increases``).

    Raises:
        InputError: an exact source breaks a relation and ``repair`` is off (source, rule, pair,
            relation and values named).
    """
    rows = [(rule, pair) for rule in sorted(cells) for pair in sorted(cells[rule])]
    if windowed and not exact:
        rows = [(rule, pair) for rule, pair in rows if cells[rule][pair][_TABLE].sum() >= min_pairs]
    if not rows:
        return Checked(cells)
    v = _values(np.stack([cells[rule][pair] for rule, pair in rows]))
    if not any(np.any(v[key]) for key in _SUMS):  # hand-built counts: independent pairs, as said
        if exact:
            raise InputError(
                f"{source}: shadow pair tables but no conversation-cluster sums (shadow conversations, "
                "b2, c2, bc, bn, cn, n2): handoffmon counts both for every pair; the file was edited or cut"
            )
        return Checked(cells)
    broken = [
        (name, bad)
        for name, bad, _ in broken_relations(_RELATIONS, _NO_SLACK, v, exact=exact, windowed=windowed)
    ]
    found = triage(broken, v["n"], _G_BOUND)
    if found is None:
        return Checked(cells)
    any_bad, idx, only_g = found
    if exact and not repair:
        i = int(idx[0])
        rule, (a, b) = rows[i]
        others = f" ({len(idx) - 1} other pair cell(s) too)" if len(idx) > 1 else ""
        raise InputError(
            f"{source}: shadow pairs {rule} {a}->{b}: their conversation-cluster sums break "
            f"{', '.join(name for name, bad in broken if bad[i])} ({_shown(v, i)}){others}: no set of "
            "conversations gives these sums (a damaged or hand-edited file?)"
        )
    repairs = tuple(
        _repair(rows[i], v, i, [name for name, bad in broken if bad[i]], bool(only_g[i]))
        for i in idx[:MAX_LISTED].tolist()
    )
    return Checked(_repaired(cells, rows, v, any_bad, only_g), repairs, len(idx))


def _values(m: np.ndarray) -> Values:
    """Per pair cell (rows of ``m``, ``SHADOW_STATS`` columns): the sums, N, B and C."""
    v: Values = {key: m[:, _POS[stat]] for stat, key in zip(SHADOW_CLUSTER, _SUMS, strict=True)}
    v["n"] = m[:, _TABLE].sum(axis=1)
    v["b"], v["c"] = m[:, _POS["model_only"]], m[:, _POS["prefix_only"]]
    return v


def _shown(v: Values, i: int) -> str:
    shown = (*zip(("conversations", *SHADOW_CLUSTER[1:]), _SUMS, strict=True), ("pairs", "n"))
    shown += (("model_only", "b"), ("prefix_only", "c"))
    return ", ".join(f"{name} = {v[key][i]:.0f}" for name, key in shown)


def _repair(row: tuple[str, Pair], v: Values, i: int, violated: list[str], only_g: bool) -> ShadowInputRepair:
    rule, (a, b) = row
    sums = {name: int(v[key][i]) for name, key in zip(SHADOW_CLUSTER, _SUMS, strict=True)}
    return ShadowInputRepair(
        rule=rule,
        prefix_model=a,
        model=b,
        violated=tuple(violated),
        **sums,
        pairs=int(v["n"][i]),
        model_only=int(v["b"][i]),
        prefix_only=int(v["c"][i]),
        action=CONVERSATIONS_DROPPED if only_g else ONE_CONVERSATION,
    )


def _repaired(
    cells: ShadowCells, rows: list[tuple[str, Pair]], v: Values, bad: np.ndarray, only_g: np.ndarray
) -> ShadowCells:
    """``cells`` with each bad cell's sums replaced: G = 0 where only G was too large, else the
    sums of one conversation holding all its pairs (G = 1, Σb² = B², Σc² = C², Σbc = BC,
    Σbn = BN, Σcn = CN, Σn² = N²)."""
    out = {rule: dict(pairs) for rule, pairs in cells.items()}
    first = _POS[SHADOW_CLUSTER[0]]
    for i in np.flatnonzero(bad).tolist():
        rule, pair = rows[i]
        vec = out[rule][pair].copy()
        n, b, c = v["n"][i], v["b"][i], v["c"][i]
        if only_g[i]:
            vec[first] = 0.0
        else:
            vec[first : first + len(SHADOW_CLUSTER)] = (1.0, b * b, c * c, b * c, b * n, c * n, n * n)
        out[rule][pair] = vec
    return out
