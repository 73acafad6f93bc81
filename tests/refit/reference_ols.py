"""Reference for the refit's Δ(A→B): OLS on the turn rows with conversation-clustered SEs
(statsmodels), per observed pair, and a comparison of the two over simulated refits.

Per pair, the pass indicator of B's rows — its clean baseline turns and the A→B handoff turns,
first rule — is regressed on a handoff indicator and a piecewise-linear depth curve (hinges at
the depth buckets' lower bounds that the baseline reaches), standard errors clustered by
conversation (``cov_type="cluster"``). The refit compares each depth bucket's handoff turns
with the baseline read at their mean depth on the line through the baseline's bucket means,
from counters only; with an effect that does not vary with depth both estimate the same Δ.
Used by ``tests/refit/test_reference_ols.py`` and ``scripts/reference_compare.py``.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from handoffmon.depth import DepthBuckets
from handoffmon.refit import refit
from handoffmon.sim.counting import clean_mask, counts_from_rows_fast
from handoffmon.sim.population import Population, TurnRows, expected_delta, simulate


def reference_delta(
    rows: TurnRows, clean: np.ndarray, a: int, b: int, edges: tuple[int, ...]
) -> tuple[float, float, int]:
    """(Δ̂, cluster-robust SE, conversations) of the handoff indicator for the pair A→B."""
    import statsmodels.api as sm

    checked = rows.verdict < 2
    base = checked & clean & (rows.model == b) & (rows.rule == 0)
    hand = checked & rows.handoff & (rows.prefix == a) & (rows.model == b) & (rows.rule == 0)
    sel = base | hand
    d = rows.depth[sel].astype(float)
    knots = [e for e in edges[1:] if np.any(d >= e) and np.sum(base & (rows.depth >= e)) >= 1]
    cols = [np.ones(len(d)), hand[sel].astype(float), d] + [np.maximum(d - k, 0.0) for k in knots]
    x = np.column_stack(cols)
    keep = np.linalg.matrix_rank(x) == x.shape[1]
    while not keep and x.shape[1] > 3:
        x = x[:, :-1]
        keep = np.linalg.matrix_rank(x) == x.shape[1]
    y = (rows.verdict[sel] == 0).astype(float)
    groups = rows.conversation[sel]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.OLS(y, x).fit(cov_type="cluster", cov_kwds={"groups": groups})
    return float(fit.params[1]), float(fit.bse[1]), len(np.unique(groups))


def compare(
    pop: Population, replicates: int, conversations: int, seed: int, min_n: int = 100
) -> dict[str, Any]:
    buckets = DepthBuckets()
    names = pop.names
    out: list[tuple[float, ...]] = []
    for i in range(replicates):
        rows = simulate(pop, conversations, seed=np.random.default_rng([seed, i]))
        truth = expected_delta(rows, rule=0)
        clean = clean_mask(rows)
        fit = refit(counts_from_rows_fast(rows, buckets), buckets=buckets, now=0.0).rules[pop.rules[0]]
        for p in fit.pairs:
            if not p.observed or p.n < min_n:
                continue
            a, b = names.index(p.prefix_model), names.index(p.model)
            ref, ref_se, _ = reference_delta(rows, clean, a, b, buckets.edges)
            t = truth[a, b]
            out.append((p.delta, p.se, p.ci_low, p.ci_high, ref, ref_se, t))
    arr = np.asarray(out)
    delta, se, lo, hi, ref, ref_se, t = arr.T
    diff = (delta - ref) / ref_se
    return {
        "pairs": len(arr),
        "mean_diff_in_ref_se": round(float(diff.mean()), 3),
        "rms_diff_in_ref_se": round(float(np.sqrt(np.mean(diff**2))), 3),
        "mean_diff_pp": round(float(np.mean(delta - ref)) * 100, 3),
        "corr": round(float(np.corrcoef(delta, ref)[0, 1]), 4),
        "median_se_ratio": round(float(np.median(se / ref_se)), 3),
        "refit_coverage": round(float(np.mean((lo <= t) & (t <= hi))), 4),
        "reference_coverage": round(float(np.mean(np.abs(ref - t) <= 1.959964 * ref_se)), 4),
        "refit_bias_pp": round(float(np.mean(delta - t)) * 100, 3),
        "reference_bias_pp": round(float(np.mean(ref - t)) * 100, 3),
        "refit_rmse_pp": round(float(np.sqrt(np.mean((delta - t) ** 2))) * 100, 3),
        "reference_rmse_pp": round(float(np.sqrt(np.mean((ref - t) ** 2))) * 100, 3),
    }
