"""Turn rows → ``Counts`` in numpy: the reference for the SQL of the turn-log source.

The same definitions as ``sources/turns.sql`` (tests check they agree row for row):

* a same-author turn is **clean** when every earlier turn of the conversation was
  written by the same model: before the first depth f_c at which a turn's model differs
  from the conversation's first model, or its prefix model is neither ``none`` nor that
  model. Clean turns feed ``baseline_checks``; on the diagonal, ``cell_stats`` describe
  them only;
* cluster sums per (rule, model, prefix model) and per (``all``, model, prefix model):
  over conversations c with y_c passes in n_c pass/fail checks, G, Σy², Σyn, Σn²;
* transitions: consecutive pass/fail checks of one rule in one conversation (by depth),
  keyed by the later turn's model and its handoff flag.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from handoffmon.counts import CELL_TOTAL, POOLED_RULE, CellStatKey, CheckKey, Counts, TransitionKey, TurnKey
from handoffmon.depth import DepthBuckets
from handoffmon.sim.population import VERDICT_NAMES, TurnRows
from handoffmon.types import NO_PREFIX


def clean_mask(rows: TurnRows) -> np.ndarray:
    """True for rows of clean same-author turns (see the module docstring)."""
    c = rows.conversation
    order = np.lexsort((rows.depth, c))
    first = np.full(int(c.max()) + 1 if len(c) else 0, -1)
    first[c[order][::-1]] = rows.model[order][::-1]  # model at each conversation's smallest depth
    m1 = first[c]
    breaks = (rows.model != m1) | ((rows.prefix >= 0) & (rows.prefix != m1))
    f = np.full(len(first), np.iinfo(np.int64).max)
    np.minimum.at(f, c[breaks], rows.depth[breaks])
    return np.asarray((rows.prefix == rows.model) & (rows.depth < f[c]))


def counts_from_rows(
    rows: TurnRows, buckets: DepthBuckets | None = None, *, clean_baseline: bool = True
) -> Counts:
    """Aggregate turn rows the way the turn-log source's SQL does.

    ``clean_baseline=False`` reproduces the contaminated baseline that came before it
    (every same-author turn is baseline), only to measure what the clean one fixes.
    """
    buckets = buckets or DepthBuckets()
    names, rules = rows.names, rows.rules
    labels = np.array([buckets.bucket(d) for d in range(int(rows.depth.max(initial=1)) + 1)], dtype=object)
    pname = np.array([*names, NO_PREFIX], dtype=object)[np.where(rows.prefix < 0, len(names), rows.prefix)]
    bucket = labels[rows.depth]
    clean = clean_mask(rows) if clean_baseline else rows.prefix == rows.model
    checked = rows.verdict < 2
    checks: Counter[CheckKey] = Counter()
    base: Counter[CheckKey] = Counter()
    stats: Counter[CellStatKey] = Counter()
    keys = list(
        zip(
            rows.rule.tolist(),
            rows.model.tolist(),
            pname.tolist(),
            bucket.tolist(),
            rows.verdict.tolist(),
            strict=True,
        )
    )
    diag = rows.prefix == rows.model
    for (r, m, p, b, v), is_clean, is_diag, d, ok in zip(
        keys, clean.tolist(), diag.tolist(), rows.depth.tolist(), checked.tolist(), strict=True
    ):
        key = CheckKey(rules[r], names[m], p, b, VERDICT_NAMES[v])  # type: ignore[arg-type]
        checks[key] += 1
        if is_clean:
            base[key] += 1
        if ok and (is_clean or not is_diag):
            stats[CellStatKey(rules[r], names[m], p, b, "depth")] += d
    _cluster_sums(rows, pname, checked & (clean | ~diag), stats)
    return Counts(
        checks=dict(checks),
        transitions=_transitions(rows),
        turns=_turns(rows, pname, bucket),
        session_lengths=_sessions(rows),
        baseline_checks=dict(base),
        cell_stats=dict(stats),
    )


def _cluster_sums(rows: TurnRows, pname: np.ndarray, use: np.ndarray, stats: Counter[CellStatKey]) -> None:
    for pooled in (False, True):
        yc: Counter[tuple[str, str, str, int]] = Counter()
        nc: Counter[tuple[str, str, str, int]] = Counter()
        cols = (rows.rule[use], rows.model[use], pname[use], rows.conversation[use], rows.verdict[use])
        for r, m, p, c, v in zip(*(col.tolist() for col in cols), strict=True):
            key = (POOLED_RULE if pooled else rows.rules[r], rows.names[m], p, c)
            nc[key] += 1
            yc[key] += v == 0
        for (rule, model, prefix, _), n in nc.items():
            y = yc[(rule, model, prefix, _)]
            for stat, val in (("conversations", 1), ("y2", y * y), ("yn", y * n), ("n2", n * n)):
                stats[CellStatKey(rule, model, prefix, CELL_TOTAL, stat)] += val


def _transitions(rows: TurnRows) -> dict[TransitionKey, int]:
    ok = rows.verdict < 2
    c, r, d = rows.conversation[ok], rows.rule[ok], rows.depth[ok]
    m, v, h = rows.model[ok], rows.verdict[ok], rows.handoff[ok]
    order = np.lexsort((d, r, c))
    c, r, d, m, v, h = (a[order] for a in (c, r, d, m, v, h))
    same = (c[1:] == c[:-1]) & (r[1:] == r[:-1]) & (d[1:] > d[:-1])
    out: Counter[TransitionKey] = Counter()
    for i in np.nonzero(same)[0].tolist():
        j = i + 1
        hand = "true" if h[j] else "false"
        out[
            TransitionKey(rows.rules[r[j]], rows.names[m[j]], hand, VERDICT_NAMES[v[i]], VERDICT_NAMES[v[j]])
        ] += 1  # type: ignore[arg-type]
    return dict(out)


def _turns(rows: TurnRows, pname: np.ndarray, bucket: np.ndarray) -> dict[TurnKey, int]:
    first = np.unique(np.stack([rows.conversation, rows.depth]), axis=1, return_index=True)[1]
    out: Counter[TurnKey] = Counter()
    for i in first.tolist():
        out[
            TurnKey(rows.names[rows.model[i]], pname[i], bucket[i], "true" if rows.handoff[i] else "false")
        ] += 1
    return dict(out)


def _sessions(rows: TurnRows) -> dict[int, int]:
    last = np.zeros(int(rows.conversation.max(initial=-1)) + 1, dtype=np.int64)
    np.maximum.at(last, rows.conversation, rows.depth)
    return {int(d): int(n) for d, n in enumerate(np.bincount(last)) if d > 0 and n}
