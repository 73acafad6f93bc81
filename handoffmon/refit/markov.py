"""Two-state (pass/fail) Markov chain of a rule's verdicts across turns.

Estimation (after ``markov-answer-instability.txt``): p_TF = n(pass→fail) / n(from
pass), p_FT = n(fail→pass) / n(from fail), counted over consecutive checks of the
same rule in the same conversation (not_applicable and error transitions are dropped).
Given the from-state the to-states are binomial, so the MLEs get Wilson intervals.

* stationary adherence s = p_FT / (p_TF + p_FT); NaN when p_TF + p_FT = 0 (the
  chain never moves and its long run is just its start) or when a from-state was
  never observed. Interval: on the logit scale around the estimate, logit s = log p_FT −
  log p_TF, with the log-proportion variances 1/x − 1/n (½ added to x and n so zeros
  stay finite; the interval is widened to contain the estimate when a zero count puts
  it at 0 or 1), so the estimate is never outside its interval.
* published only with at least ``min_from`` transitions out of each state (pass and
  fail): below that p_TF or p_FT is a handful of events and the stationary value is
  NaN, 0 or 1 in a large share of fits.
* clustering: transitions out of a state are independent trials when every conversation
  runs the same chain (the Markov property), and over-dispersed when conversations differ
  (some drift more than others). The counters keep no per-conversation transition sums, so
  the over-dispersion is read off the clean baseline's verdicts (``transition_design_effect``):
  their design effect over the one the fitted chain alone gives a conversation of the
  baseline's mean size (lag-k correlation λᵏ). Counts are divided by that ratio (≥ 1)
  before the Wilson and logit intervals. Dividing by the verdicts' design effect itself,
  which is mostly the chain's own persistence, made the intervals 1.6–2.3× too wide
  (coverage 1.00 at every level of heterogeneity: ``tests/refit/test_markov.py``).
* implied curve a(d) = s + (a₁ − s)·λ^(d−1), λ = 1 − p_TF − p_FT, started at the
  observed depth-1 adherence a₁ (a model never checked at depth 1 — a fallback that opens no
  conversation — starts at the observed adherence of its first bucket, at that bucket's first
  depth, and has no curve before it: ``curve_start``); each bucket's value is the curve averaged over the
  bucket's depths (the open last bucket "lo+" is averaged over lo … 2·lo − 1).
* half-life ln 2 / −ln|λ| turns (0 when λ = 0, inf when |λ| = 1).
* log loss = mean binomial cross-entropy and mse = mean squared error (Brier) of the
  curve's probability against every observed check, as in the paper's tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from handoffmon.refit.intervals import wilson

_EPS = 1e-9


@dataclass(frozen=True)
class MarkovArrays:
    """Vectorized Markov estimates for K models (arrays of shape (K,))."""

    p_tf: np.ndarray
    p_tf_lo: np.ndarray
    p_tf_hi: np.ndarray
    p_ft: np.ndarray
    p_ft_lo: np.ndarray
    p_ft_hi: np.ndarray
    stationary: np.ndarray
    stationary_lo: np.ndarray
    stationary_hi: np.ndarray
    half_life: np.ndarray
    n_transitions: np.ndarray


def fit_markov(
    trans: np.ndarray, z: float, *, deff: np.ndarray | None = None, min_from: int = 0
) -> MarkovArrays:
    """Estimate chains from (K, 2, 2) counts [model, from (pass, fail), to (pass, fail)].

    Args:
        trans: transition counts.
        z: normal quantile of the intervals.
        deff: (K,) design effects dividing the counts for the intervals (None = 1).
        min_from: models with fewer transitions out of pass or out of fail get NaN
            everywhere (``published`` is False).
    """
    t = trans.astype(float)
    n_p = t[:, 0].sum(axis=-1)
    n_f = t[:, 1].sum(axis=-1)
    x_tf = t[:, 0, 1]
    x_ft = t[:, 1, 0]
    scale = np.ones(len(t)) if deff is None else 1.0 / np.maximum(np.asarray(deff, dtype=float), 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        p_tf = np.where(n_p > 0, x_tf / n_p, np.nan)
        p_ft = np.where(n_f > 0, x_ft / n_f, np.nan)
        total = p_tf + p_ft
        stationary = np.where(total > 0, p_ft / total, np.nan)
        lo, hi = stationary_interval(x_tf * scale, n_p * scale, x_ft * scale, n_f * scale, z, p_tf, p_ft)
    lo, hi = np.minimum(lo, stationary), np.maximum(hi, stationary)
    tf_lo, tf_hi = wilson(x_tf * scale, n_p * scale, z)
    ft_lo, ft_hi = wilson(x_ft * scale, n_f * scale, z)
    published = (n_p >= max(min_from, 1)) & (n_f >= max(min_from, 1))
    p_tf, p_ft, stationary = (np.where(published, v, np.nan) for v in (p_tf, p_ft, stationary))
    tf_lo, tf_hi, ft_lo, ft_hi = (np.where(published, v, np.nan) for v in (tf_lo, tf_hi, ft_lo, ft_hi))
    defined = np.isfinite(stationary)
    return MarkovArrays(
        p_tf=p_tf,
        p_tf_lo=tf_lo,
        p_tf_hi=tf_hi,
        p_ft=p_ft,
        p_ft_lo=ft_lo,
        p_ft_hi=ft_hi,
        stationary=stationary,
        stationary_lo=np.where(defined, lo, np.nan),
        stationary_hi=np.where(defined, hi, np.nan),
        half_life=half_life(p_tf, p_ft),
        n_transitions=(n_p + n_f).astype(np.int64),
    )


def chain_design_effect(p_tf: np.ndarray, p_ft: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Variance of the pass share of ``size`` consecutive verdicts of a stationary chain over
    the binomial one: 1 + 2 Σ_{k<m} (1 − k/m) λᵏ with λ = 1 − p_TF − p_FT (at least 1; 1
    where anything is undefined)."""
    lam = 1.0 - np.asarray(p_tf, dtype=float) - np.asarray(p_ft, dtype=float)
    m = np.asarray(size, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        lam_m = np.power(np.abs(lam), m) * np.sign(lam) ** np.round(m)
        f = 1.0 + 2.0 * lam / (1.0 - lam) - 2.0 * lam * (1.0 - lam_m) / (m * (1.0 - lam) ** 2)
    ok = np.isfinite(f) & (m >= 1) & (np.abs(lam) < 1)
    return np.where(ok, np.maximum(f, 1.0), 1.0)


def transition_design_effect(
    verdict_deff: np.ndarray, cluster_size: np.ndarray, p_tf: np.ndarray, p_ft: np.ndarray
) -> np.ndarray:
    """Over-dispersion of transition counts between conversations: the verdicts' design effect
    (clean baseline, ≥ 1) over the part of it the chain's own persistence explains for a
    conversation of ``cluster_size`` verdicts (Σn²/N), at least 1."""
    chain = chain_design_effect(p_tf, p_ft, cluster_size)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.asarray(verdict_deff, dtype=float) / chain
    return np.where(np.isfinite(out), np.maximum(out, 1.0), 1.0)


def stationary_interval(
    x_tf: np.ndarray,
    n_p: np.ndarray,
    x_ft: np.ndarray,
    n_f: np.ndarray,
    z: float,
    p_tf: np.ndarray | None = None,
    p_ft: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Logit-scale delta-method interval of p_FT / (p_TF + p_FT), centred at the estimate
    (log p_FT − log p_TF) where both are > 0, else at the ½-corrected value."""
    a, na = x_ft + 0.5, n_f + 0.5
    b, nb = x_tf + 0.5, n_p + 0.5
    with np.errstate(invalid="ignore", divide="ignore"):
        centre = np.log(a / na) - np.log(b / nb)
        if p_tf is not None and p_ft is not None:
            mle = np.log(p_ft) - np.log(p_tf)
            centre = np.where(np.isfinite(mle), mle, centre)
        se = np.sqrt(np.maximum(1 / a - 1 / na + 1 / b - 1 / nb, 0.0))
    return _expit(centre - z * se), _expit(centre + z * se)


def _expit(x: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-x)))


def half_life(p_tf: np.ndarray, p_ft: np.ndarray) -> np.ndarray:
    """Turns for |a(d) − s| to halve: ln 2 / −ln|1 − p_TF − p_FT|."""
    lam = np.abs(1.0 - p_tf - p_ft)
    with np.errstate(divide="ignore", invalid="ignore"):
        hl = np.log(2.0) / -np.log(lam)
    hl = np.where(lam == 0, 0.0, hl)
    return np.where(lam >= 1.0, np.inf, hl)


def bucket_depths(edges: tuple[int, ...]) -> list[np.ndarray]:
    """Depths averaged over for each bucket (the open last bucket: lo … 2·lo − 1)."""
    out = []
    for i, lo in enumerate(edges):
        hi = edges[i + 1] - 1 if i + 1 < len(edges) else 2 * lo - 1
        out.append(np.arange(lo, hi + 1))
    return out


def implied_curve(
    initial: np.ndarray,
    p_tf: np.ndarray,
    p_ft: np.ndarray,
    edges: tuple[int, ...],
    first: np.ndarray | None = None,
) -> np.ndarray:
    """(K, D) bucket-averaged a(d) = s + (a₁ − s) λ^(d−1); a constant a₁ when the chain never moves.

    ``first`` (K,) bucket indexes: the curve of model k starts at ``initial[k]`` at the first
    depth of bucket ``first[k]`` instead of depth 1 (a(d) = s + (a − s) λ^(d − lo)) and is NaN
    in the buckets before it (``curve_start``). NaN throughout for a chain that is not
    published (NaN p_TF or p_FT).
    """
    lam = 1.0 - p_tf - p_ft
    total = p_tf + p_ft
    lo = np.ones(len(initial)) if first is None else np.asarray(edges, dtype=float)[np.maximum(first, 0)]
    with np.errstate(invalid="ignore", divide="ignore"):
        # no chain (NaN: not published) → no curve; λ⁰ = 1 had put a₁ in the first bucket
        s = np.where(total > 0, p_ft / total, np.where(total == 0, initial, np.nan))
    cols = []
    for depths in bucket_depths(edges):
        steps = depths[None, :] - lo[:, None]
        powers = np.power(lam[:, None], np.maximum(steps, 0)).mean(axis=1)
        cols.append(np.where(steps[:, 0] >= 0, s + (initial - s) * powers, np.nan))
    return np.stack(cols, axis=1) if cols else np.zeros((len(initial), 0))


def curve_start(passes: np.ndarray, checked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each model's implied curve starts: (K,) the observed adherence of its first bucket
    with checks and (K,) that bucket's index (0 — depth 1 — for a model that opens
    conversations; NaN and 0 for a model never checked).

    A fallback that never opens a conversation has no depth-1 adherence; its curve starts at
    the first depth it was seen at, as every other model's starts at its first turn. Started
    at depth 1 its curve, log loss and MSE were NaN although its chain was published.
    """
    checked = np.asarray(checked, dtype=float)
    k = len(checked)
    if not checked.shape[1]:
        return np.full(k, np.nan), np.zeros(k, dtype=np.int64)
    seen = checked > 0
    first = np.where(seen.any(axis=1), seen.argmax(axis=1), 0)
    rows = np.arange(k)
    with np.errstate(invalid="ignore", divide="ignore"):
        value = np.asarray(passes, dtype=float)[rows, first] / checked[rows, first]
    return value, first


def curve_losses(curve: np.ndarray, passes: np.ndarray, checked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-check log loss and Brier MSE of ``curve`` (K, D) against observed counts (K, D)."""
    f = np.clip(curve, _EPS, 1 - _EPS)
    fails = checked - passes
    use = checked > 0
    n = np.where(use, checked, 0).sum(axis=1).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        ll = -np.where(use, passes * np.log(f) + fails * np.log1p(-f), 0.0).sum(axis=1) / n
        sq = np.where(use, passes * (1 - f) ** 2 + fails * f**2, 0.0).sum(axis=1) / n
    bad = ~np.all(np.isfinite(curve) | ~use, axis=1) | (n == 0)
    return np.where(bad, np.nan, ll), np.where(bad, np.nan, sq)
