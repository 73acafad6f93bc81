"""Δ(A→B) ≈ μ + π_A + σ_B: weighted ridge least squares with sum-to-zero constraints.

Choices (see docs/concepts/statistics.md):

* weights 1/var(Δ): precise pairs count more; and because every Δ(·→B) shares the
  baseline B→B, the Δ of one suffix are correlated: with their covariance given, the
  fit is generalized least squares (whitened per suffix block);
* identifiability: Σπ = Σσ = 0, imposed exactly by an orthonormal basis Q of the
  sum-zero subspace (π = Qα, σ = Qβ), so μ is the average effect of a handoff;
* ridge: penalty ``ridge`` · (‖π‖² + ‖σ‖²), μ unpenalized. Its pull toward 0 is
  strong for models in few or noisy pairs and negligible for well-observed ones
  (the weights are ~n/p(1−p), i.e. thousands for a few hundred turns);
* covariance: the posterior-style A⁻¹ with A = XᵀΣ⁻¹X + ridge·I, inflated by the
  overdispersion φ = max(1, whitened RSS / (m − df)) when the additive model misfits;
  unidentified terms (a model never seen as prefix) keep an SE of ~1/√ridge;
* risk μ + π_A + σ_B and its SE xᵀ Cov x are given for every ordered pair.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Decomposition:
    """Fitted terms for K models.

    Attributes:
        mu: μ; NaN when no pair was observed.
        mu_se: its standard error.
        pi: (K,) prefix influence.
        pi_se: (K,) standard errors.
        sigma: (K,) suffix susceptibility.
        sigma_se: (K,) standard errors.
        risk: (K, K) μ + π_a + σ_b (diagonal is meaningless and left NaN).
        risk_se: (K, K) standard errors of ``risk``.
        residual: (K, K) Δ − risk on fitted pairs, NaN elsewhere.
        r2: weighted R² on the fitted pairs (NaN with fewer than 2 pairs).
        r2_unweighted: ordinary R² of the same fit.
        n_pairs: pairs fitted.
        dispersion: φ applied to the covariance.
    """

    mu: float
    mu_se: float
    pi: np.ndarray
    pi_se: np.ndarray
    sigma: np.ndarray
    sigma_se: np.ndarray
    risk: np.ndarray
    risk_se: np.ndarray
    residual: np.ndarray
    r2: float
    r2_unweighted: float
    n_pairs: int
    dispersion: float


def sum_zero_basis(k: int) -> np.ndarray:
    """Orthonormal K×(K−1) basis of {x : Σx = 0} (Helmert contrasts)."""
    if k < 2:
        return np.zeros((k, 0))
    from scipy.linalg import helmert

    return np.asarray(helmert(k, full=False).T, dtype=float)


def design(a: np.ndarray, b: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Rows [1, Q[a], Q[b]] for pairs (a → b)."""
    return np.hstack([np.ones((len(a), 1)), q[a], q[b]])


BlockCov = Callable[[int, np.ndarray], np.ndarray]
"""(suffix b, prefix indices a of b's fitted pairs) → covariance matrix of those Δ(a→b)."""


def decompose(
    delta: np.ndarray,
    var: np.ndarray,
    mask: np.ndarray,
    ridge: float,
    *,
    block_cov: BlockCov | None = None,
) -> Decomposition:
    """Fit μ, π, σ from a (K, K) matrix of Δ over the ``mask``-ed off-diagonal pairs.

    Args:
        delta: (K, K) Δ[a, b] for prefix a, suffix b.
        var: (K, K) variances of ``delta`` (must be > 0 where ``mask``).
        mask: (K, K) which pairs to fit.
        ridge: penalty on ‖π‖² + ‖σ‖² (0 = plain WLS; then unobserved models make the
            system singular and the pseudo-inverse picks the minimum-norm solution).
        block_cov: covariance of the Δ that share a suffix. Every Δ(·→B) is measured
            against the same baseline B→B, so their errors are correlated and that
            common error lands in σ_B; with ``block_cov`` the fit is generalized least
            squares (whitened per suffix block) and σ's standard errors include it.
            None = independent Δ with variances ``var`` (weighted least squares).
    """
    k = delta.shape[0]
    q = sum_zero_basis(k)
    a, b = np.nonzero(mask)
    m = len(a)
    if m == 0:
        return _empty(k)
    x = design(a, b, q)
    y = delta[a, b]
    xw, yw = _whiten(x, y, a, b, var, block_cov)
    penalty = np.full(x.shape[1], float(ridge))
    penalty[0] = 0.0
    gram = xw.T @ xw
    cov = _inverse(gram + np.diag(penalty), positive_definite=ridge > 0)
    theta = cov @ (xw.T @ yw)
    resid = y - x @ theta
    df = float(np.trace(cov @ gram))
    rss_w = float(np.sum((yw - xw @ theta) ** 2))
    phi = max(1.0, rss_w / (m - df)) if m - df >= 1.0 else 1.0
    cov = cov * phi
    return _assemble(k, q, theta, cov, (a, b, y, 1.0 / var[a, b], resid), phi)


def _whiten(
    x: np.ndarray, y: np.ndarray, a: np.ndarray, b: np.ndarray, var: np.ndarray, block_cov: BlockCov | None
) -> tuple[np.ndarray, np.ndarray]:
    """Rows scaled by 1/sd, or by L⁻¹ (C = LLᵀ) within each suffix block."""
    scale = 1.0 / np.sqrt(var[a, b])
    xw, yw = x * scale[:, None], y * scale
    if block_cov is None:
        return xw, yw
    from scipy.linalg import solve_triangular

    for suffix in np.unique(b):
        rows = np.nonzero(b == suffix)[0]
        if len(rows) < 2:
            continue
        try:
            chol = np.linalg.cholesky(block_cov(int(suffix), a[rows]))
        except np.linalg.LinAlgError:  # not positive definite numerically: keep the diagonal
            continue
        solved = solve_triangular(chol, np.column_stack([x[rows], y[rows]]), lower=True, check_finite=False)
        xw[rows], yw[rows] = solved[:, :-1], solved[:, -1]
    return xw, yw


def _assemble(
    k: int,
    q: np.ndarray,
    theta: np.ndarray,
    cov: np.ndarray,
    fit: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    phi: float,
) -> Decomposition:
    a, b, y, w, resid = fit
    nb = q.shape[1]
    pi_map = np.zeros((k, len(theta)))
    pi_map[:, 1 : 1 + nb] = q
    sigma_map = np.zeros((k, len(theta)))
    sigma_map[:, 1 + nb :] = q
    risk = theta[0] + (pi_map @ theta)[:, None] + (sigma_map @ theta)[None, :]
    risk_se = _pair_se(q, cov)
    np.fill_diagonal(risk, np.nan)
    np.fill_diagonal(risk_se, np.nan)
    residual = np.full((k, k), np.nan)
    residual[a, b] = resid
    return Decomposition(
        mu=float(theta[0]),
        mu_se=float(np.sqrt(cov[0, 0])),
        pi=pi_map @ theta,
        pi_se=_diag_se(pi_map, cov),
        sigma=sigma_map @ theta,
        sigma_se=_diag_se(sigma_map, cov),
        risk=risk,
        risk_se=risk_se,
        residual=residual,
        r2=_r2(y, resid, w),
        r2_unweighted=_r2(y, resid, np.ones_like(y)),
        n_pairs=len(a),
        dispersion=phi,
    )


def _inverse(precision: np.ndarray, *, positive_definite: bool) -> np.ndarray:
    """Inverse of the normal matrix: Cholesky when the ridge makes it positive definite
    (μ is pinned by any observed pair), else the pseudo-inverse (ridge = 0 may be singular)."""
    if positive_definite:
        try:
            linv = np.linalg.inv(np.linalg.cholesky(precision))
            return np.asarray(linv.T @ linv)
        except np.linalg.LinAlgError:
            pass
    return np.asarray(np.linalg.pinv(precision, hermitian=True))


def _pair_se(q: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """SE of μ + π_a + σ_b for all (a, b) in O(K·p²): var = uᵀCu + 2uᵀCv + vᵀCv."""
    k, nb = q.shape
    u = np.zeros((k, 1 + 2 * nb))
    u[:, 0] = 1.0
    u[:, 1 : 1 + nb] = q
    v = np.zeros_like(u)
    v[:, 1 + nb :] = q
    uc, vc = u @ cov, v @ cov
    var = np.sum(uc * u, axis=1)[:, None] + 2.0 * (uc @ v.T) + np.sum(vc * v, axis=1)[None, :]
    return np.asarray(np.sqrt(np.maximum(var, 0.0)))


def _diag_se(mapping: np.ndarray, cov: np.ndarray) -> np.ndarray:
    return np.asarray(np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", mapping, cov, mapping), 0.0)))


def _r2(y: np.ndarray, resid: np.ndarray, w: np.ndarray) -> float:
    if len(y) < 2:
        return float("nan")
    ybar = np.sum(w * y) / np.sum(w)
    tss = float(np.sum(w * (y - ybar) ** 2))
    return float("nan") if tss <= 0 else 1.0 - float(np.sum(w * resid**2)) / tss


def _empty(k: int) -> Decomposition:
    nan_k = np.full(k, np.nan)
    nan_kk = np.full((k, k), np.nan)
    return Decomposition(
        mu=float("nan"),
        mu_se=float("nan"),
        pi=nan_k,
        pi_se=nan_k,
        sigma=nan_k,
        sigma_se=nan_k,
        risk=nan_kk,
        risk_se=nan_kk,
        residual=nan_kk,
        r2=float("nan"),
        r2_unweighted=float("nan"),
        n_pairs=0,
        dispersion=1.0,
    )
