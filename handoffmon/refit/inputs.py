"""The refit's input check: each cell's conversation-cluster sums against each other and its checks.

Per cell, over conversations c with y_c ≤ n_c passes in n_c checks (N = Σn_c, Y = Σy_c), the
sums G, Σy², Σyn, Σn² obey, whatever the conversations: every sum ≥ 0, Y ≤ Σy² ≤ Σyn ≤ Σn²,
N ≤ Σn² ≤ N², Σy² ≤ Y², Σyn ≤ Y·N, 1 ≤ G ≤ N (a cell with checks), Y² ≤ G·Σy² and
N² ≤ G·Σn² (Cauchy–Schwarz). A cell that breaks one (a hand-edited SQLite file, a Prometheus
series lost to relabeling, one stat reset without the others) does not fail loudly on its
own: G = 0 reads as independent turns (design effect 1), a Σn² below the checks as tiny
conversations, both narrower than the data allow.

Exact sources (a SQLite file, whether ``handoffmon refit`` or the in-process refit of workers
sharing the store reads it, a turn log: totals at rest) are refused with the cell and the
relation named, beyond a hair of slack (``EXACT_REL_TOLERANCE``: workers sharing a store can
race on one conversation's partial counts). Approximate ones (Prometheus, a multiprocess
directory: series read one by one while turns land) are checked with a tolerance
(``REL_TOLERANCE``, ``ABS_TOLERANCE``) and a cell beyond it is repaired towards the wider
interval and listed in the result (``RefitResult.input_repairs``). Over a window only the
relations that increments obey are checked: a conversation that straddles the window's start
adds its cross terms to Σy², Σyn and Σn² but not to G, so G = 0 beside Σn² > 0, Σn² > N² and
Y² > G·Σy² are expected there. The window's increments come from ``PrometheusSource``, which
reads raw samples with one reset and baseline per scraped process (``window_increases``):
PromQL's ``increase`` detected resets per series, so a restart could reset a cell's Σy² and
not its Σyn (measured: Σy² = 67 beside Σyn = 27 on a healthy cell).
Shadow pairs' sums get the same policy (``refit.shadow_inputs``).

A SQLite aggregates file is totals at rest, checked at the exact slack, but repaired rather than
refused (``repair``): a worker's crash tears it. The increments a worker had not flushed (it
writes them at its idle turns) are lost, while the conversations' partial counts (y_c, n_c),
kept in the store, are not; their next checks add cross terms whose checks the file never got,
and a conversation whose first check in a cell was lost is missing from G. A small cell then
breaks a relation for good (a real ``Monitor`` that lost one flush: G = 0 beside checks, Σn²
above N², ``tests/refit/test_torn_sqlite.py``), and refusing it failed every periodic refit
from then on. A turn log cannot be torn so and stays refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Generic, TypeVar

import numpy as np

from handoffmon.errors import InputError
from handoffmon.refit.cells import CellArrays, ClusterSums
from handoffmon.refit.result import InputRepair

EXACT_REL_TOLERANCE = 0.01
EXACT_ABS_TOLERANCE = 2.0
"""Slack of an exact source: workers sharing a SQLite store can both start from the same stored
partial counts of a conversation (two of its turns checked at once) and add the same square's
increment twice, a Σn² two short in a one-conversation cell; nothing a hand or a lost row does
stays inside it."""
REL_TOLERANCE = 0.05
"""Relative slack of an approximate source's relations: a scrape can land between a turn's
increments of two series (the exporter's tables are copied family by family, the shadow pair
stats series by series) and queries of two families can straddle a scrape's commit."""
ABS_TOLERANCE = 2.0
"""Absolute slack on top (rounding, a turn in flight in a small cell)."""
WINDOW_REL_TOLERANCE = 0.5
WINDOW_ABS_TOLERANCE = 10.0
"""Slack over a window, kept from when windows were read with ``increase``: its per-series
extrapolation and first-sample loss put a young cell's stats about one scrape's increments
apart (healthy cells broke Σyn ≤ Σn² by 12 vs 9 and N ≤ Σn² by 11 vs 9), and its per-series
reset detection lost a stat's whole pre-restart count (Σy² = 67 beside Σyn = 27). The window
read now shares one reset and baseline per scraped process (``sources.prometheus``); a lost
series (a stat at 0 beside checks) is still far outside."""
_DENSE_CELLS_MAX = 1 << 21
"""Cell spaces up to this size are binned densely (two float64 arrays of at most 16 MB)."""
MAX_LISTED = 100
"""Repaired cells listed in the result (the largest by checks); all are counted."""

ONE_CONVERSATION = "one_conversation"
"""Repair: the cell reads as one conversation holding all its checks (design effect N, one
degree of freedom), the widest reading its checks allow."""
CONVERSATIONS_DROPPED = "conversations_dropped"
"""Repair when only G exceeds the checks: G is ignored and the cell counts as N²/Σn²
conversations (a lower bound on the conversations behind consistent Σn² and N)."""

Values = dict[str, np.ndarray]
"""A relation's operands by name, one entry per row (cell or shadow pair)."""
Relation = tuple[str, Callable[[Values], np.ndarray], Callable[[Values], np.ndarray], bool, bool]
"""(name, lhs, rhs, holds for windowed increments, needs the row's checks): lhs ≤ rhs."""
_NO_SLACK = frozenset({"conversations >= 0", "y2 >= 0", "yn >= 0", "n2 >= 0", "conversations >= 1"})
"""Relations checked without tolerance: a sign or a missing series is no rounding."""
_RELATIONS: tuple[Relation, ...] = (
    # (name, lhs, rhs, holds for windowed increments, needs the cell's checks)
    ("conversations >= 0", lambda v: -v["g"], lambda v: 0 * v["g"], True, False),
    ("y2 >= 0", lambda v: -v["y2"], lambda v: 0 * v["g"], True, False),
    ("yn >= 0", lambda v: -v["yn"], lambda v: 0 * v["g"], True, False),
    ("n2 >= 0", lambda v: -v["n2"], lambda v: 0 * v["g"], True, False),
    ("y2 <= yn", lambda v: v["y2"], lambda v: v["yn"], True, False),
    ("yn <= n2", lambda v: v["yn"], lambda v: v["n2"], True, False),
    ("passes <= y2", lambda v: v["y"], lambda v: v["y2"], True, True),
    ("checks <= n2", lambda v: v["n"], lambda v: v["n2"], True, True),
    # G ≤ N holds for increments too, but ``increase`` lost the first sample of a series born in
    # the window and a cell's checks are many sparse series (bucket × verdict) beside one G
    # series: a healthy 12 s window across a restart had G > N in 14 cells of about 50. The
    # window read now counts such a series from 0; checking G ≤ N over a window again is
    # left until measured
    ("conversations <= checks", lambda v: v["g"], lambda v: v["n"], False, True),
    ("conversations >= 1", lambda v: np.minimum(v["n"], 1.0), lambda v: v["g"], False, True),
    ("n2 <= checks^2", lambda v: v["n2"], lambda v: v["n"] ** 2, False, True),
    ("y2 <= passes^2", lambda v: v["y2"], lambda v: v["y"] ** 2, False, True),
    ("yn <= passes*checks", lambda v: v["yn"], lambda v: v["y"] * v["n"], False, True),
    ("passes^2 <= conversations*y2", lambda v: v["y"] ** 2, lambda v: v["g"] * v["y2"], False, True),
    ("checks^2 <= conversations*n2", lambda v: v["n"] ** 2, lambda v: v["g"] * v["n2"], False, True),
)


_Cells = TypeVar("_Cells")
_Repair = TypeVar("_Repair")


@dataclasses.dataclass(frozen=True)
class Checked(Generic[_Cells, _Repair]):
    """An input check's outcome: the cells to fit, the repairs listed and how many were repaired."""

    cells: _Cells
    repairs: tuple[_Repair, ...] = ()
    repaired: int = 0


def check_cells(
    cells: CellArrays, *, source: str, exact: bool, windowed: bool, repair: bool = False
) -> Checked[CellArrays, InputRepair]:
    """Check every fitted cell's cluster sums against each other and its checks.

    Args:
        cells: the refit's cells (``build_cells``).
        source: the source's label, named in errors.
        exact: totals at rest (SQLite file, turn log): a violated relation (beyond 1% + 2; a
            sign or a missing G at once) is an error.
            Otherwise violations beyond the tolerance are repaired and reported.
        windowed: the counts are increases over a window (only relations increments obey).
        repair: with ``exact``, a cell that breaks a relation beyond the exact slack is repaired
            and reported instead of refused: a SQLite aggregates file, which a worker's crash
            tears (module docstring).

    Raises:
        InputError: an exact source breaks a relation and ``repair`` is off (source, cell,
            relation and values named),
            or a source with clean-baseline counts carries no cluster sums at all.
    """
    if not cells.clustered:
        if exact and len(cells.baseline.rule) and len(cells.checks.rule):
            raise InputError(
                f"{source}: clean-baseline counts but no conversation-cluster sums "
                "(cell_stats conversations, y2, yn, n2): a handoffmon that keeps one keeps the other; "
                "the file was edited or cut"
            )
        return Checked(cells)
    keys, v = _cell_values(cells)
    broken = _broken(cells, keys, v, exact=exact, windowed=windowed)
    found = triage(broken, v["n"], "conversations <= checks")
    if found is None:
        return Checked(cells)
    any_bad, idx, only_g = found
    if exact and not repair:
        i = int(idx[0])
        names = [name for name, bad in broken if bad[i]]
        others = f" ({len(idx) - 1} other cell(s) too)" if len(idx) > 1 else ""
        raise InputError(
            f"{source}: {_cell_name(cells, keys, i)}: its conversation-cluster sums break "
            f"{', '.join(names)} ({_values(v, i)}){others}: no set of conversations gives these sums "
            "(a damaged or hand-edited file?)"
        )
    repairs = [
        _repair(cells, keys, v, i, [name for name, bad in broken if bad[i]], bool(only_g[i]))
        for i in idx[:MAX_LISTED].tolist()
    ]
    return Checked(_repaired(cells, keys, v, any_bad, only_g), tuple(repairs), len(idx))


def triage(
    broken: list[tuple[str, np.ndarray]], n: np.ndarray, g_bound: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """None when no row breaks a relation; else (rows that break one, their indexes with the
    most checks or pairs first, rows that break only ``g_bound``: G above the checks)."""
    any_bad = np.logical_or.reduce([bad for _, bad in broken])
    if not np.any(any_bad):
        return None
    idx = np.flatnonzero(any_bad)
    others = np.logical_or.reduce([bad for name, bad in broken if name != g_bound] + [np.zeros_like(any_bad)])
    return any_bad, idx[np.argsort(-n[idx], kind="stable")], any_bad & ~others


def _broken(
    cells: CellArrays, keys: tuple[np.ndarray, ...], v: Values, *, exact: bool, windowed: bool
) -> list[tuple[str, np.ndarray]]:
    """(relation, cells that break it beyond the source's slack) for every relation checked."""
    pooled_n_known = not cells.excluded_rules  # pooled sums also cover rules beyond max_rules
    knows_n = (keys[0] < len(cells.rules)) | pooled_n_known
    return [
        (name, bad & knows_n if needs_n else bad)
        for name, bad, needs_n in broken_relations(_RELATIONS, _NO_SLACK, v, exact=exact, windowed=windowed)
    ]


def broken_relations(
    relations: tuple[Relation, ...], no_slack: frozenset[str], v: Values, *, exact: bool, windowed: bool
) -> list[tuple[str, np.ndarray, bool]]:
    """(relation, rows that break it beyond the source's slack, whether it needs the checks) for
    every relation of ``relations`` the source's kind is checked against (cells and shadow pairs).

    Over a window an approximate source is checked only against the relations increments obey;
    the relations named in ``no_slack`` (signs, a missing G) get no slack."""
    slack_rel, slack_abs = REL_TOLERANCE, ABS_TOLERANCE
    if exact:
        slack_rel, slack_abs = EXACT_REL_TOLERANCE, EXACT_ABS_TOLERANCE
    elif windowed:
        slack_rel, slack_abs = WINDOW_REL_TOLERANCE, WINDOW_ABS_TOLERANCE
    broken: list[tuple[str, np.ndarray, bool]] = []
    for name, lhs, rhs, in_window, needs_n in relations:
        if windowed and not exact and not in_window:
            continue
        right = rhs(v)
        slack = 0.0 if name in no_slack else slack_rel * np.abs(right) + slack_abs
        broken.append((name, lhs(v) > right + slack, needs_n))
    return broken


def _cell_values(cells: CellArrays) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], Values]:
    """Per cluster-sum row and per fitted cell with checks: (rule, prefix, model) and G, Σy², Σyn,
    Σn², N, Y (N, Y of the clean baseline on the diagonal when the counts carry one; the pooled
    rule's summed over rules). Rows come first, in ``cluster_sums`` order.

    Cell totals are binned over the whole (rule, prefix, model) space when it is small (one
    linear pass: 0.17 s of a K = 100, 10-rule refit went to the sort of 2.4·10⁶ cell indices),
    else via a sort."""
    r, p, k = len(cells.rules), len(cells.prefixes), len(cells.models)
    c = cells.cluster_sums
    e = cells.checks
    use = (e.prefix != e.model) if cells.clean_baseline else np.ones(len(e.rule), dtype=bool)
    parts = [(e.rule[use], e.prefix[use], e.model[use], e.passes[use], e.fails[use])]
    if cells.clean_baseline:
        b = cells.baseline
        parts.append((b.rule, b.model, b.model, b.passes, b.fails))
    rule, prefix, model, passes, fails = (np.concatenate([part[j] for part in parts]) for j in range(5))
    per_rule = (rule * p + prefix) * k + model
    checks_flat = np.concatenate([per_rule, per_rule + (r - rule) * (p * k)])  # and in the pooled rule
    checks_n, checks_y = np.tile(passes + fails, 2), np.tile(passes, 2)
    sums_flat = (c.rule * p + c.prefix) * k + c.model
    space = (r + 1) * p * k
    if space <= _DENSE_CELLS_MAX:
        n_all = np.bincount(checks_flat, weights=checks_n, minlength=space)
        y_all = np.bincount(checks_flat, weights=checks_y, minlength=space)
        has_row = np.zeros(space, dtype=bool)
        has_row[sums_flat] = True
        order = np.concatenate([sums_flat, np.flatnonzero((n_all > 0) & ~has_row)])
        n, y = n_all[order], y_all[order]
    else:
        flat, inverse = np.unique(np.concatenate([sums_flat, checks_flat]), return_inverse=True)
        # rows of ``cluster_sums`` first, so index i < len(c.rule) is row i of the sums
        order = np.concatenate([sums_flat, np.setdiff1d(flat, sums_flat)])
        pos = np.searchsorted(flat, order)
        inv_order = np.empty(len(flat), dtype=np.int64)
        inv_order[pos] = np.arange(len(order))
        at = inv_order[inverse[len(sums_flat) :]]
        n = np.bincount(at, weights=checks_n, minlength=len(order))
        y = np.bincount(at, weights=checks_y, minlength=len(order))
    v: Values = {"n": n, "y": y}
    for j, name in enumerate(("g", "y2", "yn", "n2")):
        v[name] = np.concatenate([c.sums[:, j], np.zeros(len(order) - len(c.rule))])
    rr, rem = np.divmod(order, p * k)
    pp, mm = np.divmod(rem, k)
    return (rr, pp, mm), v


def _cell_name(cells: CellArrays, keys: tuple[np.ndarray, ...], i: int) -> str:
    rules = (*cells.rules, "all")
    return f"cell {rules[keys[0][i]]} {cells.prefixes[keys[1][i]]}->{cells.models[keys[2][i]]}"


def _values(v: Values, i: int) -> str:
    shown = ("conversations", "y2", "yn", "n2", "checks", "passes")
    return ", ".join(
        f"{s} = {v[k][i]:.0f}" for s, k in zip(shown, ("g", "y2", "yn", "n2", "n", "y"), strict=True)
    )


def _repair(
    cells: CellArrays, keys: tuple[np.ndarray, ...], v: Values, i: int, violated: list[str], only_g: bool
) -> InputRepair:
    rules = (*cells.rules, "all")
    return InputRepair(
        rule=rules[keys[0][i]],
        prefix_model=cells.prefixes[keys[1][i]],
        model=cells.models[keys[2][i]],
        violated=tuple(violated),
        conversations=int(v["g"][i]),
        y2=int(v["y2"][i]),
        yn=int(v["yn"][i]),
        n2=int(v["n2"][i]),
        checks=int(v["n"][i]),
        passes=int(v["y"][i]),
        action=CONVERSATIONS_DROPPED if only_g else ONE_CONVERSATION,
    )


def _repaired(
    cells: CellArrays, keys: tuple[np.ndarray, ...], v: Values, bad: np.ndarray, only_g: np.ndarray
) -> CellArrays:
    """``cells`` with each bad cell's sums replaced: G = 0 where only G was too large, else the
    sums of one conversation holding the cell's checks (G = 1, Σy² = Y², Σyn = YN, Σn² = N²)."""
    c = cells.cluster_sums
    m = len(c.rule)
    cols = [v["g"].copy(), v["y2"].copy(), v["yn"].copy(), v["n2"].copy()]
    one = bad & ~only_g
    cols[0] = np.where(only_g, 0.0, np.where(one, 1.0, cols[0]))
    cols[1] = np.where(one, v["y"] ** 2, cols[1])
    cols[2] = np.where(one, v["y"] * v["n"], cols[2])
    cols[3] = np.where(one, v["n"] ** 2, cols[3])
    extra = np.flatnonzero(one[m:]) + m  # cells with checks but no row of sums: rows added
    sums = np.column_stack(cols)
    old = (c.rule, c.prefix, c.model)
    rule, prefix, model = (np.concatenate([o, key[extra]]) for o, key in zip(old, keys, strict=True))
    new = ClusterSums(rule, prefix, model, np.concatenate([sums[:m], sums[extra]]))
    return dataclasses.replace(cells, cluster_sums=new)
