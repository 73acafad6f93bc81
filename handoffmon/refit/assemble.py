"""Arrays → result records: per-pair ``PairEffect`` lists and per-model ``ModelScores``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from handoffmon.refit.decomposition import Decomposition
from handoffmon.refit.result import ModelScores, PairEffect


@dataclass(frozen=True)
class PairArrays:
    """(K, K) arrays [prefix, suffix] describing every ordered pair's Δ estimate."""

    n: np.ndarray
    delta: np.ndarray
    se: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    reported: np.ndarray
    coverage: np.ndarray


def pair_effects(rule: str, models: tuple[str, ...], arr: PairArrays, dec: Decomposition) -> list[PairEffect]:
    """One ``PairEffect`` per ordered pair of distinct models (observed or not).

    ``significant`` means the interval excludes 0 and is only ever set for reported pairs.
    """
    cols = (arr.n, arr.delta, arr.se, arr.ci_low, arr.ci_high, dec.risk, dec.risk_se)
    n, delta, se, lo, hi, risk, risk_se = (c.tolist() for c in cols)
    rep, cov, res = arr.reported.tolist(), arr.coverage.tolist(), dec.residual.tolist()
    out = []
    for a, pa in enumerate(models):
        for b, mb in enumerate(models):
            if a == b:
                continue
            sig = bool(rep[a][b] and (lo[a][b] > 0 or hi[a][b] < 0))
            out.append(
                PairEffect(
                    rule, pa, mb, int(n[a][b]), delta[a][b], se[a][b], lo[a][b], hi[a][b], sig,
                    risk[a][b], risk_se[a][b], bool(rep[a][b]), cov[a][b], res[a][b],
                )
            )  # fmt: skip
    return out


def model_scores(
    models: tuple[str, ...], dec: Decomposition, n_used: np.ndarray, reported: np.ndarray
) -> dict[str, ModelScores]:
    """π/σ with SEs per model; ``n`` = checked turns of reported pairs the model is in."""
    used = np.where(reported, n_used, 0)
    n_model = used.sum(axis=0) + used.sum(axis=1)
    cols = (dec.pi, dec.pi_se, dec.sigma, dec.sigma_se)
    rows = zip(*(c.tolist() for c in cols), n_model.tolist(), strict=True)
    return {
        m: ModelScores(p, pse, s, sse, int(n)) for m, (p, pse, s, sse, n) in zip(models, rows, strict=True)
    }
