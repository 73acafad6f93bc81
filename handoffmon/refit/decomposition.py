"""Δ(A→B) ≈ μ + π_A + σ_B: weighted ridge least squares with sum-to-zero constraints.

Choices (see docs/concepts/statistics.md):

* weights 1/var(Δ): precise pairs count more; and because every Δ(·→B) shares the
  baseline B→B, the Δ of one suffix are correlated: with their covariance given, the
  fit is generalized least squares (whitened per suffix block);
* identified only: π is fitted for the models seen as a prefix in a fitted pair, σ for
  those seen as a suffix; a model absent from a role is **not estimable** there (NaN)
  and takes no part in that role's constraint, so it cannot widen anyone's interval;
* identifiability: Σπ = Σσ = 0 over the identified models, imposed exactly by an
  orthonormal basis Q of the sum-zero subspace (π = Qα, σ = Qβ), so μ is the average
  effect of a handoff;
* ridge: penalty ``ridge`` · (‖π‖² + ‖σ‖²), μ unpenalized — a Gaussian prior with SD
  1/√ridge on each term (the refit sets it from ``prior_sd_pp``: 5 pp ↔ ridge 400). Its
  pull toward 0 is strong for models in few or noisy pairs and negligible for
  well-observed ones (the weights are ~n/p(1−p), i.e. thousands for a few hundred turns);
* covariance: the posterior-style A⁻¹ with A = XᵀΣ⁻¹X + ridge·I, inflated by the
  overdispersion φ = max(1, whitened RSS / (m − df)) when the additive model misfits;
* fit: weighted R² and adjusted R² 1 − (RSS/(m − df)) / (TSS/(m − 1)) with df = tr(hat);
* risk μ + π_A + σ_B and its SE are given for every pair of identified models.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

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
        r2_adjusted: weighted R² adjusted for the fit's effective degrees of freedom.
        prior_sd: (τ_π, τ_σ) prior SDs the fit used (fixed or fitted; NaN without a ridge).
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
    r2_adjusted: float = float("nan")
    prior_sd: tuple[float, float] = (float("nan"), float("nan"))


def sum_zero_basis(k: int) -> np.ndarray:
    """Orthonormal K×(K−1) basis of {x : Σx = 0} (Helmert contrasts)."""
    if k < 2:
        return np.zeros((k, 0))
    from scipy.linalg import helmert

    return np.asarray(helmert(k, full=False).T, dtype=float)


def weighted_zero_basis(weights: np.ndarray) -> np.ndarray:
    """Orthonormal basis of {x : Σ wᵢxᵢ = 0} (K × (K − 1)); equal weights give the same space as Helmert."""
    w = np.asarray(weights, dtype=float)
    if len(w) < 2:
        return np.zeros((len(w), 0))
    if not np.all(w > 0):
        w = np.where(w > 0, w, w[w > 0].min() if np.any(w > 0) else 1.0)
    from scipy.linalg import null_space

    return np.asarray(null_space((w / np.linalg.norm(w))[None, :]))


BlockCov = Callable[[int, np.ndarray], np.ndarray]
"""(suffix b, prefix indices a of b's fitted pairs) → covariance matrix of those Δ(a→b)."""


@dataclass(frozen=True)
class LowRankBlocks:
    """Covariance of the Δ(a→b) sharing suffix b as diagonal plus low rank:
    C_b[a, a'] = own[b, a]·[a = a'] + Σ_j factor[b, a, j]·factor[b, a', j].

    The shared term is the common baseline B→B (rank ≤ depth buckets, × rules when pooled),
    so C_b⁻¹ takes an r × r solve (Woodbury) instead of inverting an s × s block.

    Attributes:
        own: (K, K) [b, a] each Δ's own (handoff-side) variance.
        factor: (K, K, r) [b, a, j] square-root factor of the shared-baseline covariance.
    """

    own: np.ndarray
    factor: np.ndarray


Blocks = BlockCov | LowRankBlocks
"""A dense per-suffix covariance callback or the structured diagonal-plus-low-rank form."""


def decompose(
    delta: np.ndarray,
    var: np.ndarray,
    mask: np.ndarray,
    ridge: float,
    *,
    block_cov: Blocks | None = None,
    turns: np.ndarray | None = None,
    adaptive: bool = False,
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
        turns: (K, K) turns behind each Δ. Given, the constraints weight each model by its
            turns in that role (Σ n_a π_a = Σ n_b σ_b = 0): π and σ are relative to the
            traffic-weighted average, and a model seen in a handful of turns (a canary)
            barely moves the reference, so it cannot widen anyone else's interval. None =
            equal weights (Σπ = Σσ = 0).
        adaptive: estimate the prior SDs τ_π and τ_σ from the data (empirical Bayes:
            ``prior_penalties``) with ``ridge`` as the largest penalty, i.e. 1/√ridge as the
            smallest prior SD. A fixed prior that is tight next to the spread of the true
            effects pulls every estimate toward 0 and its interval with it (coverage drops
            where the effects are largest); estimated, the prior only shrinks as much as the
            spread of the effects the data show allows.
    """
    k = delta.shape[0]
    a, b = np.nonzero(mask)
    m = len(a)
    if m == 0:
        return _empty(k)
    prefixes = np.unique(a)
    suffixes = np.unique(b)
    if turns is None:
        qa, qb = sum_zero_basis(len(prefixes)), sum_zero_basis(len(suffixes))
    else:
        used = np.where(mask, turns, 0.0)
        qa = weighted_zero_basis(used.sum(axis=1)[prefixes])
        qb = weighted_zero_basis(used.sum(axis=0)[suffixes])
    p = 1 + qa.shape[1] + qb.shape[1]
    pi_map = np.zeros((k, p))
    pi_map[prefixes, 1 : 1 + qa.shape[1]] = qa
    sigma_map = np.zeros((k, p))
    sigma_map[suffixes, 1 + qa.shape[1] :] = qb
    y = delta[a, b]
    gz, rz, yy = _normal_equations(k, a, b, y, var, block_cov)
    t = np.vstack([np.eye(1, p), pi_map, sigma_map])  # z = (μ, π, σ) = T θ
    gram = t.T @ gz @ t
    rhs = t.T @ rz
    penalty = np.full(p, float(ridge))
    penalty[0] = 0.0
    if adaptive and ridge > 0:
        penalty = prior_penalties(gram, rhs, (qa.shape[1], qb.shape[1]), float(ridge))
    cov = _inverse(gram + np.diag(penalty), positive_definite=ridge > 0)
    theta = cov @ rhs
    fitted = theta[0] + (pi_map @ theta)[a] + (sigma_map @ theta)[b]
    resid = y - fitted
    df = float(np.trace(cov @ gram))
    rss_w = float(yy - 2 * theta @ rhs + theta @ gram @ theta)
    phi = max(1.0, rss_w / (m - df)) if m - df >= 1.0 else 1.0
    cov = cov * phi
    known = (np.isin(np.arange(k), prefixes), np.isin(np.arange(k), suffixes))
    dec = _assemble(k, (pi_map, sigma_map), known, theta, cov, (a, b, y, 1.0 / var[a, b], resid), phi)
    dec = _with_adjusted(dec, y, resid, 1.0 / var[a, b], df)
    if ridge > 0:
        sd = (_prior_sd(penalty, 1, qa.shape[1]), _prior_sd(penalty, 1 + qa.shape[1], qb.shape[1]))
        dec = replace(dec, prior_sd=sd)
    return dec


def _prior_sd(penalty: np.ndarray, start: int, size: int) -> float:
    return float(1.0 / np.sqrt(penalty[start])) if size else float("nan")


def prior_penalties(
    gram: np.ndarray, rhs: np.ndarray, sizes: tuple[int, int], max_penalty: float, *, iterations: int = 50
) -> np.ndarray:
    """Ridge penalties (0 for μ, 1/τ_π² for π, 1/τ_σ² for σ) with τ² fitted by marginal likelihood.

    The prior θ_π ~ N(0, τ_π² I), θ_σ ~ N(0, τ_σ² I) on the orthonormal sum-zero
    coordinates, with the Gaussian likelihood of the weighted normal equations; EM
    (Dempster, Laird & Rubin 1977; the update of Harville 1977) iterates
    τ² ← (‖θ̂‖² + tr C) / p per role, θ̂ and C the posterior mean and covariance under the
    current τ², and converges to the maximum of the marginal likelihood. τ² is floored at
    1/``max_penalty`` (the configured prior SD is the least spread assumed), so the
    penalty is never larger than the fixed ridge's.
    """
    p_pi, p_sigma = sizes
    blocks = (slice(1, 1 + p_pi), slice(1 + p_pi, 1 + p_pi + p_sigma))
    penalty = np.zeros(gram.shape[0])
    for blk in blocks:
        penalty[blk] = max_penalty
    for _ in range(iterations):
        cov = _inverse(gram + np.diag(penalty), positive_definite=True)
        theta = cov @ rhs
        new = penalty.copy()
        for blk, size in zip(blocks, sizes, strict=True):
            if size:
                tau2 = (float(theta[blk] @ theta[blk]) + float(np.trace(cov[blk, blk]))) / size
                new[blk] = min(max_penalty, 1.0 / tau2) if tau2 > 0 else max_penalty
        done = np.allclose(new, penalty, rtol=1e-3, atol=0.0)
        penalty = new
        if done:
            break
    return penalty


def _normal_equations(
    k: int, a: np.ndarray, b: np.ndarray, y: np.ndarray, var: np.ndarray, block_cov: Blocks | None
) -> tuple[np.ndarray, np.ndarray, float]:
    """Zᵀ C⁻¹ Z, Zᵀ C⁻¹ y and yᵀ C⁻¹ y for the one-hot design Z = [1, e_a, e_b].

    C is block diagonal by suffix (independent pairs when ``block_cov`` is None). Working
    on the one-hot design costs O(Σ block²) instead of the O(m·p²) Gram of the dense design
    (K = 100: 10⁶ instead of 4·10⁸ per fit). Blocks of equal size are handled together and
    every block's terms land in one ``np.bincount`` over the flattened Gram. Blocks in the
    diagonal-plus-low-rank form (``_LowRank``: C⁻¹ = D⁻¹ − V Vᵀ) never form C⁻¹: their
    prefix-prefix terms are the scattered D⁻¹ plus one product −V Vᵀ of all blocks' V
    (K × Σ r, one BLAS call instead of scattering Σ s² entries).
    """
    n = 1 + 2 * k
    g_idx: list[np.ndarray] = []
    g_w: list[np.ndarray] = []
    r_idx: list[np.ndarray] = []
    r_w: list[np.ndarray] = []
    low: list[tuple[np.ndarray, np.ndarray]] = []  # (prefix rows (B, s), V (B, s, r))
    yy = 0.0
    for rows, form in _block_inverses(a, b, var, block_cov):  # rows (B, s)
        ia, ib = 1 + a[rows], 1 + k + b[rows[:, 0]][:, None]  # (B, s), (B, 1)
        ys = y[rows]
        if isinstance(form, _LowRank):
            dinv, v = form.dinv, form.v
            vt = np.swapaxes(v, 1, 2)
            one = dinv - (v @ vt.sum(axis=2, keepdims=True))[:, :, 0]  # C⁻¹ 1
            cy = dinv * ys - (v @ (vt @ ys[:, :, None]))[:, :, 0]  # C⁻¹ y
            g_idx.append(ia * (n + 1))
            g_w.append(dinv)
            low.append((ia, v))
        else:
            cinv = form
            one = cinv.sum(axis=2)
            cy = (cinv @ ys[:, :, None])[:, :, 0]
            g_idx.append(ia[:, :, None] * n + ia[:, None, :])
            g_w.append(cinv)
        s11, s1y = one.sum(axis=1, keepdims=True), cy.sum(axis=1, keepdims=True)
        zero = np.zeros_like(ib)
        g_idx += [
            np.concatenate([zero, zero + ib, ib * n, ib * (n + 1)], axis=1),
            np.concatenate([ia, ia * n, ia * n + ib, ib * n + ia], axis=1),
        ]
        g_w += [np.concatenate([s11] * 4, axis=1), np.concatenate([one] * 4, axis=1)]
        r_idx += [zero, ib, ia]
        r_w += [s1y, s1y, cy]
        yy += float(np.sum(ys * cy))
    gz = _accumulate(g_idx, g_w, n * n).reshape(n, n)
    if low:
        vfull = np.zeros((n, sum(v.shape[0] * v.shape[2] for _, v in low)))
        col = 0
        for ia, v in low:
            bsz, _, r = v.shape
            cols = col + np.arange(bsz)[:, None, None] * r + np.arange(r)[None, None, :]  # (B, 1, r)
            vfull[np.broadcast_to(ia[:, :, None], v.shape), np.broadcast_to(cols, v.shape)] = v
            col += bsz * r
        lo, hi = 1, 1 + k
        gz[lo:hi, lo:hi] -= vfull[lo:hi] @ vfull[lo:hi].T
    return gz, _accumulate(r_idx, r_w, n), yy


def _accumulate(idx: list[np.ndarray], weights: list[np.ndarray], size: int) -> np.ndarray:
    if not idx:
        return np.zeros(size)
    flat = np.concatenate([i.ravel() for i in idx])
    return np.bincount(flat, weights=np.concatenate([w.ravel() for w in weights]), minlength=size)


@dataclass(frozen=True)
class _LowRank:
    """C⁻¹ of equal-size blocks as D⁻¹ − V Vᵀ: dinv (B, s), v (B, s, r)."""

    dinv: np.ndarray
    v: np.ndarray


def _block_inverses(
    a: np.ndarray, b: np.ndarray, var: np.ndarray, block_cov: Blocks | None
) -> list[tuple[np.ndarray, np.ndarray | _LowRank]]:
    """(rows, C⁻¹) per group of equal-size suffix blocks, rows (B, s) and C⁻¹ (B, s, s) or
    its ``_LowRank`` form; a block that is not positive definite keeps 1/var."""
    order = np.argsort(b, kind="stable")
    splits = np.nonzero(np.diff(b[order]))[0] + 1
    groups = np.split(order, splits)
    out: list[tuple[np.ndarray, np.ndarray | _LowRank]] = []
    by_size: dict[int, list[np.ndarray]] = {}
    for rows in groups:
        if block_cov is None or len(rows) < 2:
            out.append((rows[None], np.diag(1.0 / var[a[rows], b[rows]])[None]))
        else:
            by_size.setdefault(len(rows), []).append(rows)
    for blocks in by_size.values():
        assert block_cov is not None  # only filled when block_cov is given
        rows = np.stack(blocks)
        inv = _group_inverse(block_cov, a[rows], b[rows[:, 0]])
        if isinstance(inv, _LowRank):
            out.append((rows, inv))
            continue
        for i, cinv in enumerate(inv):
            if cinv is None:
                inv[i] = np.diag(1.0 / var[a[rows[i]], b[rows[i]]])
        out.append((rows, np.stack(inv)))  # type: ignore[arg-type]
    return out


def _group_inverse(block_cov: Blocks, a: np.ndarray, b: np.ndarray) -> list[np.ndarray | None] | _LowRank:
    """C⁻¹ of the blocks of suffixes ``b`` over prefixes ``a`` (B, s); None where not positive
    definite; the ``_LowRank`` form for diagonal-plus-low-rank blocks with r < s."""
    if not isinstance(block_cov, LowRankBlocks):
        return _batched_inverse(np.stack([block_cov(int(bi), ai) for bi, ai in zip(b, a, strict=True)]))
    own = block_cov.own[b[:, None], a]  # (B, s)
    w = block_cov.factor[b[:, None], a]  # (B, s, r)
    if w.shape[2] >= w.shape[1] or not np.all(own > 0):
        return _batched_inverse(_dense(own, w))
    # Woodbury: (D + W Wᵀ)⁻¹ = D⁻¹ − D⁻¹W (I + Wᵀ D⁻¹ W)⁻¹ Wᵀ D⁻¹ = D⁻¹ − V Vᵀ with
    # V = D⁻¹W L⁻ᵀ, L the Cholesky factor of the r × r inner matrix (positive definite: D > 0)
    dinv = 1.0 / own
    dw = dinv[:, :, None] * w
    inner = np.eye(w.shape[2]) + np.swapaxes(w, 1, 2) @ dw
    try:
        linv = np.linalg.inv(np.linalg.cholesky(inner))
    except np.linalg.LinAlgError:  # rounding on an extreme block: invert the blocks outright
        return _batched_inverse(_dense(own, w))
    return _LowRank(dinv, dw @ np.swapaxes(linv, 1, 2))


def _dense(own: np.ndarray, w: np.ndarray) -> np.ndarray:
    cov: np.ndarray = w @ np.swapaxes(w, 1, 2)
    diag = np.arange(own.shape[1])
    cov[:, diag, diag] += own
    return cov


def _batched_inverse(covs: np.ndarray) -> list[np.ndarray | None]:
    """Inverses of positive-definite matrices (None for any that is not)."""
    try:
        np.linalg.cholesky(covs)
        inv = np.linalg.inv(covs)
        return list(inv)
    except np.linalg.LinAlgError:
        out: list[np.ndarray | None] = []
        for c in covs:
            try:
                np.linalg.cholesky(c)
                out.append(np.linalg.inv(c))
            except np.linalg.LinAlgError:
                out.append(None)
        return out


def _assemble(
    k: int,
    maps: tuple[np.ndarray, np.ndarray],
    known: tuple[np.ndarray, np.ndarray],
    theta: np.ndarray,
    cov: np.ndarray,
    fit: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    phi: float,
) -> Decomposition:
    a, b, y, w, resid = fit
    pi_map, sigma_map = maps
    has_pi, has_sigma = known
    pi, sigma = pi_map @ theta, sigma_map @ theta
    risk = theta[0] + pi[:, None] + sigma[None, :]
    risk_se = _pair_se(pi_map, sigma_map, cov)
    estimable = has_pi[:, None] & has_sigma[None, :] & ~np.eye(k, dtype=bool)
    residual = np.full((k, k), np.nan)
    residual[a, b] = resid
    return Decomposition(
        mu=float(theta[0]),
        mu_se=float(np.sqrt(cov[0, 0])),
        pi=np.where(has_pi, pi, np.nan),
        pi_se=np.where(has_pi, _diag_se(pi_map, cov), np.nan),
        sigma=np.where(has_sigma, sigma, np.nan),
        sigma_se=np.where(has_sigma, _diag_se(sigma_map, cov), np.nan),
        risk=np.where(estimable, risk, np.nan),
        risk_se=np.where(estimable, risk_se, np.nan),
        residual=residual,
        r2=_r2(y, resid, w),
        r2_unweighted=_r2(y, resid, np.ones_like(y)),
        n_pairs=len(a),
        dispersion=phi,
    )


def _with_adjusted(
    dec: Decomposition, y: np.ndarray, resid: np.ndarray, w: np.ndarray, df: float
) -> Decomposition:
    """Adjusted R²: residual and total mean squares on m − df and m − 1 degrees of freedom."""
    m = len(y)
    if m - df < 1.0 or m < 2:
        return dec
    ybar = np.sum(w * y) / np.sum(w)
    tss = float(np.sum(w * (y - ybar) ** 2))
    if tss <= 0:
        return dec
    adj = 1.0 - (float(np.sum(w * resid**2)) / (m - df)) / (tss / (m - 1))
    return replace(dec, r2_adjusted=adj)


def _inverse(precision: np.ndarray, *, positive_definite: bool) -> np.ndarray:
    """Inverse of the normal matrix: Cholesky when the ridge makes it positive definite
    (μ is pinned by any observed pair), else the pseudo-inverse (ridge = 0 may be singular).
    The Cholesky inverse is LAPACK's potrf + potri (about a quarter of the flops of
    inverting the triangular factor by a general solve and multiplying it out)."""
    if positive_definite:
        from scipy.linalg.lapack import dpotrf, dpotri

        factor, info = dpotrf(precision, lower=True, clean=False)
        if info == 0:
            inv, info = dpotri(factor, lower=True)
            if info == 0:
                lower = np.tril(inv)
                return np.asarray(lower + np.tril(inv, -1).T)
    return np.asarray(np.linalg.pinv(precision, hermitian=True))


def _pair_se(pi_map: np.ndarray, sigma_map: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """SE of μ + π_a + σ_b for all (a, b) in O(K·p²): var = uᵀCu + 2uᵀCv + vᵀCv."""
    u = pi_map.copy()
    u[:, 0] = 1.0
    v = sigma_map
    uc, vc = u @ cov, v @ cov
    var = np.sum(uc * u, axis=1)[:, None] + 2.0 * (uc @ v.T) + np.sum(vc * v, axis=1)[None, :]
    return np.asarray(np.sqrt(np.maximum(var, 0.0)))


def _diag_se(mapping: np.ndarray, cov: np.ndarray) -> np.ndarray:
    # diag(M C Mᵀ) as a row-wise dot of (M C) with M: one BLAS product, not an O(i·j·k) einsum loop
    return np.asarray(np.sqrt(np.maximum(((mapping @ cov) * mapping).sum(axis=1), 0.0)))


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
