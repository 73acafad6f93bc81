"""Offline switch matrix: paired BCa Δ per cell, BCa cell means and the π/σ decomposition.

Here every episode ran under every cell (prefix A → suffix B, final-turn switch), so
Δ(A→B) = mean_e [s_{A→B}(e) − s_{B→B}(e)] is a paired, randomized contrast — not
observational like the production refit. Episodes missing from a cell or from its
baseline are dropped from that pair only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from handoffmon.refit.assemble import PairArrays, model_scores, pair_effects
from handoffmon.refit.bootstrap import bca_means
from handoffmon.refit.decomposition import decompose
from handoffmon.refit.result import CellMean, RuleFit, SwitchMatrixResult
from handoffmon.refit.threads import single_threaded_blas


@dataclass(frozen=True)
class ScoreTable:
    """Episode scores as a dense (K, K, E) array with NaN where a cell lacks an episode."""

    models: tuple[str, ...]
    episodes: tuple[str, ...]
    scores: np.ndarray

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[str, str, str, float]]) -> ScoreTable:
        """Build from (episode, prefix_model, suffix_model, score) rows (duplicates: last wins)."""
        rows = list(rows)
        models = tuple(sorted({r[1] for r in rows} | {r[2] for r in rows}))
        episodes = tuple(sorted({r[0] for r in rows}))
        m = {name: i for i, name in enumerate(models)}
        e = {name: i for i, name in enumerate(episodes)}
        scores = np.full((len(models), len(models), len(episodes)), np.nan)
        for ep, a, b, s in rows:
            scores[m[a], m[b], e[ep]] = s
        return cls(models, episodes, scores)


def _bca_grouped(
    rows: np.ndarray, resamples: int, confidence: float, rng: np.random.Generator
) -> tuple[np.ndarray, ...]:
    """BCa of row means where each row may lack some columns (NaN).

    Rows sharing the same set of present columns are bootstrapped together (one shared
    index matrix, as in the vectorized ``bca_means``); with a complete matrix that is
    a single group.
    """
    c = rows.shape[0]
    est, lo, hi, se = (np.full(c, np.nan) for _ in range(4))
    n = np.zeros(c, dtype=np.int64)
    present = ~np.isnan(rows)
    groups: dict[bytes, list[int]] = {}
    for i in range(c):
        groups.setdefault(present[i].tobytes(), []).append(i)
    for members in groups.values():
        cols = present[members[0]]
        k = int(cols.sum())
        n[members] = k
        if k < 2:
            continue
        res = bca_means(rows[members][:, cols], resamples=resamples, confidence=confidence, rng=rng)
        est[members], lo[members], hi[members], se[members] = res.estimate, res.ci_low, res.ci_high, res.se
    return n, est, lo, hi, se


def switch_matrix(
    table: ScoreTable,
    *,
    resamples: int = 1000,
    seed: int | None = None,
    confidence: float = 0.95,
    ridge: float = 1.0,
    min_n: int = 2,
    source: str = "scores",
    rule: str = "score",
    now: float | None = None,
) -> SwitchMatrixResult:
    """Analyse a switch matrix of episode scores.

    Args:
        table: the scores.
        resamples: bootstrap resamples per cell.
        seed: RNG seed (same seed → same intervals).
        confidence: interval level.
        ridge: decomposition ridge strength.
        min_n: minimum paired episodes for a pair's Δ to be reported.
        source: label recorded in the result.
        rule: label for the pairs' ``rule`` field.
        now: creation time (default ``time.time()``).
    """
    rng = np.random.default_rng(seed)
    k, e = len(table.models), len(table.episodes)
    cells = _cell_means(table, resamples, confidence, rng)
    diag = table.scores[np.arange(k), np.arange(k)]  # (K, E): baseline B→B per suffix B
    deltas = table.scores - diag[None, :, :]  # (K, K, E) paired δ per episode
    n_d, d, d_lo, d_hi, d_se = (
        x.reshape(k, k) for x in _bca_grouped(deltas.reshape(k * k, e), resamples, confidence, rng)
    )
    reported = (~np.eye(k, dtype=bool)) & (n_d >= max(min_n, 2))
    with single_threaded_blas():
        dec = decompose(
            np.where(reported, d, np.nan),
            _pair_variance(deltas, n_d),
            reported,
            ridge,
            block_cov=_paired_block_cov(deltas),
        )
    arr = PairArrays(n_d, d, d_se, d_lo, d_hi, reported, np.where(reported, 1.0, np.nan))
    models = model_scores(table.models, dec, n_d, reported)
    pairs = pair_effects(rule, table.models, arr, dec)
    fit = RuleFit(rule, dec.mu, dec.mu_se, dec.r2, dec.r2_unweighted, dec.n_pairs, models, pairs)
    return SwitchMatrixResult(
        created_at=time.time() if now is None else float(now),
        source=source,
        n_episodes=e,
        resamples=resamples,
        seed=seed,
        confidence=confidence,
        fit=fit,
        cells=cells,
    )


def _cell_means(
    table: ScoreTable, resamples: int, confidence: float, rng: np.random.Generator
) -> list[CellMean]:
    """BCa mean of every non-empty cell (drawn first from ``rng``, before the Δ)."""
    k, e = len(table.models), len(table.episodes)
    n, mean, lo, hi, _ = _bca_grouped(table.scores.reshape(k * k, e), resamples, confidence, rng)
    return [
        CellMean(
            table.models[i // k], table.models[i % k], int(n[i]), float(mean[i]), float(lo[i]), float(hi[i])
        )
        for i in range(k * k)
        if n[i] > 0
    ]


def _paired_block_cov(deltas: np.ndarray) -> Callable[[int, np.ndarray], np.ndarray]:
    """Empirical Cov(δ̄_ab, δ̄_a'b) = cov_e(δ_ab, δ_a'b)/n: all δ(·→b) subtract the same
    s_bb(e), so they are correlated. Over the episodes every pair in the block has; a
    block with fewer than 3 such episodes falls back to independence (diagonal)."""

    def cov(b: int, a: np.ndarray) -> np.ndarray:
        block = deltas[a, b]  # (len(a), E)
        common = ~np.isnan(block).any(axis=0)
        n = int(common.sum())
        own = _pair_variance(block[:, None, :], (~np.isnan(block)).sum(axis=-1)[:, None])[:, 0]
        if n < 3:
            return np.diag(own)
        c = np.cov(block[:, common], ddof=1) / n
        np.fill_diagonal(c, np.maximum(np.diag(c), own))
        return np.asarray(c)

    return cov


def _pair_variance(deltas: np.ndarray, n: np.ndarray) -> np.ndarray:
    """var(δ̄) = s²/n for the WLS weights, floored at (½/n)² so all-equal δ stay finite."""
    with np.errstate(invalid="ignore", divide="ignore"):
        ok = n >= 2
        v = np.where(
            ok, np.nanvar(np.where(ok[..., None], deltas, 0.0), axis=-1, ddof=1) / np.maximum(n, 1), np.nan
        )
        return np.asarray(np.maximum(v, 0.25 / np.maximum(n, 1) ** 2))
