"""Offline switch matrix: paired BCa Δ per cell, BCa cell means and the π/σ decomposition.

Here every episode ran under every cell (prefix A → suffix B, final-turn switch), so
Δ(A→B) = mean_e [s_{A→B}(e) − s_{B→B}(e)] is a paired, randomized contrast — not
observational like the production refit. Episodes missing from a cell or from its
baseline are dropped from that pair only. Episodes of one script share its difficulty,
so with several scripts the bootstrap resamples scripts first; ``significant`` is
controlled for the false-discovery rate over the matrix's pairs (Benjamini–Hochberg).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from handoffmon.refit.assemble import PairArrays, model_scores, pair_effects
from handoffmon.refit.bootstrap import bca_means, cluster_bca_means
from handoffmon.refit.decomposition import decompose
from handoffmon.refit.multiplicity import bh_adjust
from handoffmon.refit.result import CellMean, PairEffect, RuleFit, SwitchMatrixResult
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
    rows: np.ndarray,
    resamples: int,
    confidence: float,
    rng: np.random.Generator,
    clusters: np.ndarray | None = None,
) -> tuple[np.ndarray, ...]:
    """BCa of row means where each row may lack some columns (NaN): (n, est, lo, hi, se, p).

    Rows sharing the same set of present columns are bootstrapped together (one shared
    resampling, as in the vectorized ``bca_means``); with a complete matrix that is a
    single group. When the present columns span two or more ``clusters`` (scripts), the
    scripts are resampled as a level above the episodes (``cluster_bca_means``).
    """
    c = rows.shape[0]
    est, lo, hi, se, p = (np.full(c, np.nan) for _ in range(5))
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
        data = rows[members][:, cols]
        labels = clusters[cols] if clusters is not None else None
        if labels is not None and len(np.unique(labels)) >= 2:
            res = cluster_bca_means(data, labels, resamples=resamples, confidence=confidence, rng=rng)
        else:
            res = bca_means(data, resamples=resamples, confidence=confidence, rng=rng)
        est[members], lo[members], hi[members] = res.estimate, res.ci_low, res.ci_high
        se[members], p[members] = res.se, res.p_value
    return n, est, lo, hi, se, p


def episode_clusters(episodes: Iterable[str]) -> np.ndarray:
    """Cluster (script) of every episode id ``<script>#<run>``; ids without ``#`` are their own script."""
    return np.array([e.rsplit("#", 1)[0] for e in episodes])


def switch_matrix(
    table: ScoreTable,
    *,
    resamples: int = 1000,
    seed: int | None = None,
    confidence: float = 0.95,
    ridge: float = 1.0,
    min_n: int = 20,
    fdr: float = 0.05,
    source: str = "scores",
    rule: str = "score",
    now: float | None = None,
) -> SwitchMatrixResult:
    """Analyse a switch matrix of episode scores.

    Args:
        table: the scores; episode ids ``<script>#<run>`` name their script, and with
            several scripts the bootstrap resamples scripts, then episodes within them.
        resamples: bootstrap resamples per cell.
        seed: RNG seed (same seed → same intervals).
        confidence: interval level.
        ridge: decomposition ridge strength.
        min_n: minimum paired episodes for a pair's Δ to be reported.
        fdr: Benjamini–Hochberg false-discovery rate over the reported pairs;
            ``significant`` = adjusted p ≤ ``fdr``. Degenerate pairs (every δ equal) have
            no interval, no p-value and are never significant.
        source: label recorded in the result.
        rule: label for the pairs' ``rule`` field.
        now: creation time (default ``time.time()``).
    """
    rng = np.random.default_rng(seed)
    k, e = len(table.models), len(table.episodes)
    clusters = episode_clusters(table.episodes)
    cells = _cell_means(table, resamples, confidence, rng, clusters)
    diag = table.scores[np.arange(k), np.arange(k)]  # (K, E): baseline B→B per suffix B
    deltas = table.scores - diag[None, :, :]  # (K, K, E) paired δ per episode
    n_d, d, d_lo, d_hi, d_se, d_p = (
        x.reshape(k, k) for x in _bca_grouped(deltas.reshape(k * k, e), resamples, confidence, rng, clusters)
    )
    reported = (~np.eye(k, dtype=bool)) & (n_d >= max(min_n, 2))
    p_raw = np.where(reported, d_p, np.nan)
    p_adj = bh_adjust(p_raw)
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
    index = {m: i for i, m in enumerate(table.models)}
    pairs = [
        _with_p(
            pe,
            p_raw[index[pe.prefix_model], index[pe.model]],
            p_adj[index[pe.prefix_model], index[pe.model]],
            fdr,
        )
        for pe in pair_effects(rule, table.models, arr, dec)
    ]
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
        clusters=len(np.unique(clusters)) if e else 0,
        min_n=min_n,
        fdr=fdr,
    )


def _with_p(pair: PairEffect, p_raw: float, p_adj: float, fdr: float) -> PairEffect:
    """The pair with its p-values; significant only under the false-discovery control."""
    sig = bool(pair.observed and np.isfinite(p_adj) and p_adj <= fdr)
    return dataclasses.replace(pair, p_value=float(p_raw), p_adjusted=float(p_adj), significant=sig)


def _cell_means(
    table: ScoreTable, resamples: int, confidence: float, rng: np.random.Generator, clusters: np.ndarray
) -> list[CellMean]:
    """BCa mean of every non-empty cell (drawn first from ``rng``, before the Δ)."""
    k, e = len(table.models), len(table.episodes)
    n, mean, lo, hi, *_ = _bca_grouped(table.scores.reshape(k * k, e), resamples, confidence, rng, clusters)
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
