"""The refit pipeline: cells → Δ → decomposition → Markov and curves → ``RefitResult``."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from handoffmon.config import RefitConfig
from handoffmon.counts import Counts
from handoffmon.depth import DepthBuckets
from handoffmon.errors import InputError
from handoffmon.refit.assemble import PairArrays, model_scores, pair_effects
from handoffmon.refit.cells import CellArrays, build_cells, wilson, z_value
from handoffmon.refit.decomposition import Decomposition, decompose
from handoffmon.refit.delta import DeltaTable, pool_rules, stratified_delta
from handoffmon.refit.markov import MarkovArrays, curve_losses, fit_markov, implied_curve
from handoffmon.refit.result import (
    ALL_RULES,
    OBSERVATIONAL_NOTE,
    CellAdherence,
    DepthCurve,
    MarkovFit,
    PairEffect,
    RefitResult,
    RuleFit,
)
from handoffmon.refit.threads import single_threaded_blas


@dataclass(frozen=True)
class _RuleInput:
    """Arrays for one fit: Δ strata, by-depth counts and transitions."""

    strata_passes: np.ndarray  # (1, P, K, S)
    strata_fails: np.ndarray
    depth_passes: np.ndarray  # (P, K, D)
    depth_fails: np.ndarray
    transitions: np.ndarray  # (K, 3, 2, 2)


def run_refit(
    counts: Counts,
    *,
    buckets: DepthBuckets,
    settings: RefitConfig,
    source: str = "local",
    now: float | None = None,
    window_s: float | None = None,
) -> RefitResult:
    """See ``handoffmon.refit.refit``."""
    with single_threaded_blas():
        return _run(counts, buckets, settings, source, now, window_s)


def _run(
    counts: Counts,
    buckets: DepthBuckets,
    settings: RefitConfig,
    source: str,
    now: float | None,
    window_s: float | None,
) -> RefitResult:
    cells = build_cells(counts, buckets)
    if ALL_RULES in cells.rules:
        raise InputError(
            f"rule name {ALL_RULES!r} is reserved for the fit pooled over rules; rename the rule"
        )
    fitter = _RuleFitter(cells, buckets, settings)
    fits: dict[str, RuleFit] = {}
    for i, rule in enumerate(cells.rules):
        sl = slice(i, i + 1)
        fits[rule] = fitter.fit(
            rule,
            _RuleInput(
                cells.passes[sl], cells.fails[sl], cells.passes[i], cells.fails[i], cells.transitions[i]
            ),
        )
    fits[ALL_RULES] = fitter.fit(
        ALL_RULES,
        _RuleInput(
            pool_rules(cells.passes),
            pool_rules(cells.fails),
            cells.passes.sum(axis=0),
            cells.fails.sum(axis=0),
            cells.transitions.sum(axis=0),
        ),
    )
    return RefitResult(
        created_at=time.time() if now is None else float(now),
        source=source,
        observational=True,
        note=OBSERVATIONAL_NOTE,
        rules=fits,
        confidence=settings.confidence,
        min_n=settings.min_n,
        ridge=settings.ridge,
        buckets=buckets.labels,
        window_s=window_s,
    )


class _RuleFitter:
    """Fits one rule (or the pooled ``all``) against the shared model list."""

    def __init__(self, cells: CellArrays, buckets: DepthBuckets, settings: RefitConfig) -> None:
        self.cells = cells
        self.buckets = buckets
        self.settings = settings
        self.z = z_value(settings.confidence)

    def fit(self, rule: str, inp: _RuleInput) -> RuleFit:
        dt = stratified_delta(inp.strata_passes, inp.strata_fails, self.settings.min_n)
        dec = decompose(
            dt.delta[0], dt.var[0], dt.reported[0], self.settings.ridge, block_cov=dt.block_cov(0)
        )
        markov, after, no_handoff, curves = self._dynamics(rule, inp)
        return RuleFit(
            rule=rule,
            mu=dec.mu,
            mu_se=dec.mu_se,
            r2=dec.r2,
            r2_unweighted=dec.r2_unweighted,
            n_pairs=dec.n_pairs,
            models=model_scores(self.cells.models, dec, dt.n_used[0], dt.reported[0]),
            pairs=self._pairs(rule, dt, dec),
            markov=markov,
            markov_after_handoff=after,
            markov_no_handoff=no_handoff,
            curves=curves,
            cells=self._cells(rule, inp),
        )

    def _pairs(self, rule: str, dt: DeltaTable, dec: Decomposition) -> list[PairEffect]:
        se = np.sqrt(dt.var[0])
        arr = PairArrays(
            dt.n[0], dt.delta[0], se, dt.delta[0] - self.z * se, dt.delta[0] + self.z * se,
            dt.reported[0], dt.coverage[0],
        )  # fmt: skip
        return pair_effects(rule, self.cells.models, arr, dec)

    def _cells(self, rule: str, inp: _RuleInput) -> list[CellAdherence]:
        x, n = inp.depth_passes, inp.depth_passes + inp.depth_fails  # (P, K, D)
        lo, hi = wilson(x, n, self.z)
        with np.errstate(invalid="ignore", divide="ignore"):
            adh = np.where(n > 0, x / n, np.nan)
        prefixes, models = self.cells.prefixes, self.cells.models
        nl, al, ll, hl = (arr.tolist() for arr in (n, adh, lo, hi))  # one conversion, not one per cell
        return [
            CellAdherence(
                prefixes[a],
                models[b],
                rule,
                tuple(nl[a][b]),
                tuple(al[a][b]),
                tuple(ll[a][b]),
                tuple(hl[a][b]),
            )
            for a, b in zip(*np.nonzero(n.sum(axis=-1)), strict=True)
        ]

    def _dynamics(
        self, rule: str, inp: _RuleInput
    ) -> tuple[dict[str, MarkovFit], dict[str, MarkovFit], dict[str, MarkovFit], dict[str, DepthCurve]]:
        k = len(self.cells.models)
        p, f = inp.depth_passes.astype(float), inp.depth_fails.astype(float)
        diag = np.arange(k)
        # observed by depth (K, D): all prefixes; same author or none; other models
        obs_all = (p.sum(axis=0), (p + f).sum(axis=0))
        same_p = p[diag, diag] + p[self.cells.none_index]
        same_n = same_p + f[diag, diag] + f[self.cells.none_index]
        other_p = p[:k].sum(axis=0) - p[diag, diag]
        other_n = other_p + f[:k].sum(axis=0) - f[diag, diag]
        with np.errstate(invalid="ignore", divide="ignore"):
            initial = obs_all[0][:, 0] / obs_all[1][:, 0] if obs_all[0].shape[1] else np.full(k, np.nan)
        t = inp.transitions
        pooled, pooled_curve = self._markov(rule, None, t.sum(axis=1), initial, obs_all)
        after, _ = self._markov(rule, True, t[:, 0], initial, (other_p, other_n))
        no_h, _ = self._markov(rule, False, t[:, 1], initial, (same_p, same_n))
        return pooled, after, no_h, self._curves(rule, obs_all, pooled_curve)

    def _markov(
        self,
        rule: str,
        after_handoff: bool | None,
        trans: np.ndarray,
        initial: np.ndarray,
        observed: tuple[np.ndarray, np.ndarray],
    ) -> tuple[dict[str, MarkovFit], np.ndarray]:
        ma = fit_markov(trans, self.z)
        curve = implied_curve(initial, ma.p_tf, ma.p_ft, self.buckets.edges)
        ll, mse = curve_losses(curve, *observed)
        fits = {
            m: _markov_fit(m, rule, after_handoff, ma, i, float(initial[i]), float(ll[i]), float(mse[i]))
            for i, m in enumerate(self.cells.models)
            if ma.n_transitions[i] > 0
        }
        return fits, curve

    def _curves(
        self, rule: str, observed: tuple[np.ndarray, np.ndarray], fitted: np.ndarray
    ) -> dict[str, DepthCurve]:
        x, n = observed
        lo, hi = wilson(x, n, self.z)
        with np.errstate(invalid="ignore", divide="ignore"):
            adh = np.where(n > 0, x / n, np.nan)
        labels = self.buckets.labels
        return {
            m: DepthCurve(
                m,
                rule,
                labels,
                tuple(int(v) for v in n[i]),
                tuple(adh[i].tolist()),
                tuple(lo[i].tolist()),
                tuple(hi[i].tolist()),
                tuple(fitted[i].tolist()),
            )
            for i, m in enumerate(self.cells.models)
            if n[i].sum() > 0
        }


def _markov_fit(
    model: str, rule: str, after: bool | None, ma: MarkovArrays, i: int, initial: float, ll: float, mse: float
) -> MarkovFit:
    return MarkovFit(
        model=model,
        rule=rule,
        after_handoff=after,
        p_tf=float(ma.p_tf[i]),
        p_tf_ci=(float(ma.p_tf_lo[i]), float(ma.p_tf_hi[i])),
        p_ft=float(ma.p_ft[i]),
        p_ft_ci=(float(ma.p_ft_lo[i]), float(ma.p_ft_hi[i])),
        stationary=float(ma.stationary[i]),
        stationary_ci=(float(ma.stationary_lo[i]), float(ma.stationary_hi[i])),
        half_life_turns=float(ma.half_life[i]),
        log_loss=ll,
        mse=mse,
        n_transitions=int(ma.n_transitions[i]),
        initial=initial,
    )
