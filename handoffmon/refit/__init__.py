"""The refit: turns aggregate counters into handoff effects, π/σ, risk and Markov decay.

Pure numpy/scipy, no I/O: ``Counts`` in, ``RefitResult`` out. scipy is imported lazily
inside the estimators; ``import handoffmon`` never imports this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from handoffmon.config import RefitConfig
from handoffmon.refit.result import (
    ALL_RULES,
    OBSERVATIONAL_NOTE,
    SCHEMA_VERSION,
    CellAdherence,
    CellMean,
    DepthCurve,
    InputRepair,
    MarkovFit,
    ModelScores,
    PairEffect,
    RefitResult,
    RuleFit,
    ShadowInputRepair,
    SwitchMatrixResult,
)

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.counts import Counts
    from handoffmon.depth import DepthBuckets

__all__ = [
    "ALL_RULES",
    "OBSERVATIONAL_NOTE",
    "SCHEMA_VERSION",
    "CellAdherence",
    "CellMean",
    "DepthCurve",
    "InputRepair",
    "MarkovFit",
    "ModelScores",
    "PairEffect",
    "RefitResult",
    "RuleFit",
    "ShadowInputRepair",
    "SwitchMatrixResult",
    "refit",
]


def refit(
    counts: Counts,
    *,
    buckets: DepthBuckets,
    settings: RefitConfig | None = None,
    source: str = "local",
    now: float | None = None,
    window_s: float | None = None,
    exact: bool = False,
    repair: bool = False,
) -> RefitResult:
    """Fit everything from one ``Counts`` snapshot.

    Args:
        counts: aggregate counters (local snapshot, Prometheus or CSV).
        buckets: the depth buckets the counts were recorded with.
        settings: ``min_n``, ``confidence``, ``prior_sd_pp``, ``fdr``, … (defaults: ``RefitConfig()``).
        source: label recorded in the result.
        now: creation time (UNIX seconds); ``time.time()`` when None.
        window_s: time window the counts cover, if known (the cluster sums are then checked
            as increments, see ``handoffmon.refit.inputs``).
        exact: the counts are totals at rest (a SQLite file, a turn log, a monitor's own
            snapshot): cluster sums of a cell or a shadow pair cell that no set of conversations
            can give are an ``InputError`` naming the cell. Otherwise (Prometheus, a
            multiprocess directory) such cells are read conservatively and listed in
            ``RefitResult.input_repairs`` and ``shadow_input_repairs``.
        repair: with ``exact``, such cells are checked at the exact slack but repaired and
            listed, not refused: a SQLite aggregates file, which a worker's crash tears (its
            unflushed increments lost, its conversations' partial counts kept in the store;
            ``handoffmon.refit.inputs``).

    Returns:
        A ``RefitResult`` with one ``RuleFit`` per rule and one for ``"all"``. Its Δ
        are observational (see ``OBSERVATIONAL_NOTE``).

    Raises:
        InputError: ``exact`` counts (without ``repair``) whose cluster sums (of a cell or a
            shadow pair cell) no conversations can give.
    """
    from handoffmon.refit.engine import run_refit

    return run_refit(
        counts,
        buckets=buckets,
        settings=settings or RefitConfig(),
        source=source,
        now=now,
        window_s=window_s,
        exact=exact,
        repair=repair,
    )
