"""Arrays → result records: per-pair ``PairEffect`` lists and per-model ``ModelScores``."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from handoffmon.refit.decomposition import Decomposition
from handoffmon.refit.result import ModelScores, PairEffect, PairTable, encode_floats

if TYPE_CHECKING:
    from handoffmon.refit.delta import IntoTable

_PAIR_FIELDS = tuple(f.name for f in fields(PairEffect))


@dataclass(frozen=True)
class PairArrays:
    """(K, K) arrays [prefix, suffix] describing every ordered pair's Δ estimate.

    ``significant`` None = the interval excludes 0 (no multiplicity control: callers that
    test many pairs pass BH-based flags, see ``refit.multiplicity``).
    """

    n: np.ndarray
    delta: np.ndarray
    se: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    reported: np.ndarray
    coverage: np.ndarray
    p_value: np.ndarray | None = None
    p_adjusted: np.ndarray | None = None
    significant: np.ndarray | None = None
    design_effect: np.ndarray | None = None


def pair_effects(rule: str, models: tuple[str, ...], arr: PairArrays, dec: Decomposition) -> PairTable:
    """One ``PairEffect`` per ordered pair of distinct models that is reported or has a risk,
    built when first read (``PairTable``).

    Pairs with neither a Δ nor an estimable risk (a model not identified in that role)
    are left out: they carry no number.
    """
    k = len(models)
    nan = np.full((k, k), np.nan)
    sig = arr.significant
    if sig is None:
        sig = arr.reported & ((arr.ci_low > 0) | (arr.ci_high < 0))
    keep = (arr.reported | np.isfinite(dec.risk) | (arr.n > 0)) & ~np.eye(k, dtype=bool)
    a_idx, b_idx = np.nonzero(keep)
    cols = tuple(
        np.asarray(c)[a_idx, b_idx]
        for c in (
            arr.n, arr.delta, arr.se, arr.ci_low, arr.ci_high, sig, dec.risk, dec.risk_se, arr.reported,
            arr.coverage, dec.residual,
            nan if arr.p_value is None else arr.p_value,
            nan if arr.p_adjusted is None else arr.p_adjusted,
            nan if arr.design_effect is None else arr.design_effect,
        )
    )  # fmt: skip

    def build() -> list[PairEffect]:
        rows = zip(*(c.tolist() for c in cols), strict=True)
        return [
            PairEffect(
                rule,
                models[a],
                models[b],
                int(n),
                d,
                se,
                lo,
                hi,
                bool(s and rep),
                r,
                rse,
                bool(rep),
                cov,
                res,
                p,
                q,
                de,
            )
            for a, b, (n, d, se, lo, hi, s, r, rse, rep, cov, res, p, q, de) in zip(
                a_idx.tolist(), b_idx.tolist(), rows, strict=True
            )
        ]

    def encoded() -> list[dict[str, Any]]:
        # what _encode makes of build()'s records, column by column
        n, d, se, lo, hi, s, r, rse, rep, cov, res, p, q, de = cols
        rep_b = rep.astype(bool)
        floats = [encode_floats(c) for c in (d, se, lo, hi)]
        risk = [encode_floats(c) for c in (r, rse)]
        tail = [encode_floats(c) for c in (cov, res, p, q, de)]
        names = [models[a] for a in a_idx.tolist()], [models[b] for b in b_idx.tolist()]
        rows = zip(
            *names,
            n.astype(np.int64).tolist(),
            *floats,
            (s.astype(bool) & rep_b).tolist(),
            *risk,
            rep_b.tolist(),
            *tail,
            strict=True,
        )
        return [dict(zip(_PAIR_FIELDS, (rule, *row), strict=True)) for row in rows]

    return PairTable(build, len(a_idx), encoded)


def model_scores(
    models: tuple[str, ...],
    dec: Decomposition,
    n_used: np.ndarray,
    reported: np.ndarray,
    into: IntoTable | None = None,
) -> dict[str, ModelScores]:
    """π/σ with SEs per model; ``n`` = checked turns of reported pairs the model is in.

    ``into``: Δ of all handoffs into each model, when known.
    """
    used = np.where(reported, n_used, 0)
    n_model = used.sum(axis=0) + used.sum(axis=1)
    k = len(models)
    nan = np.full(k, np.nan)
    into_cols = (
        (into.delta, into.ci_low, into.ci_high, into.n, into.p_value, into.p_adjusted, into.significant)
        if into is not None
        else (nan, nan, nan, np.zeros(k), nan, nan, np.zeros(k, dtype=bool))
    )
    cols = (dec.pi, dec.pi_se, dec.sigma, dec.sigma_se, n_model, *into_cols)
    rows = zip(*(np.asarray(c).tolist() for c in cols), strict=True)
    return {
        m: ModelScores(p, pse, s, sse, int(n), d, lo, hi, int(nn), pv, q, bool(sig))
        for m, (p, pse, s, sse, n, d, lo, hi, nn, pv, q, sig) in zip(models, rows, strict=True)
    }
