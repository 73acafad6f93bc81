"""The refit pipeline: cells → Δ → decomposition → Markov and curves → ``RefitResult``."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from handoffmon.config import RefitConfig
from handoffmon.counts import Counts
from handoffmon.depth import DepthBuckets
from handoffmon.refit.assemble import PairArrays, model_scores, pair_effects
from handoffmon.refit.cells import CellArrays, RuleArrays, build_cells
from handoffmon.refit.decomposition import LowRankBlocks, decompose
from handoffmon.refit.delta import DeltaTable, PairSums, deltas, pair_sums
from handoffmon.refit.inputs import check_cells
from handoffmon.refit.intervals import wilson, z_value
from handoffmon.refit.markov import (
    curve_losses,
    curve_start,
    fit_markov,
    implied_curve,
    transition_design_effect,
)
from handoffmon.refit.result import (
    ALL_RULES,
    OBSERVATIONAL_NOTE,
    REPAIR_NOTE,
    SHADOW_REPAIR_NOTE,
    SWITCH_COST_NOTE,
    VERDICT_ROUTING_NOTE,
    CellAdherence,
    DepthCurve,
    MarkovFit,
    RefitResult,
    RuleFit,
    SwitchCost,
)
from handoffmon.refit.routing_check import verdict_routing
from handoffmon.refit.shadow_inputs import check_shadow
from handoffmon.refit.switch_costs import shadow_cells, swap, swap_roles, switch_costs
from handoffmon.refit.threads import single_threaded_blas

log = logging.getLogger("handoffmon.refit")

_TURNS = (("all", None), ("handoff", 0), ("same_author", 1))
"""MarkovFit.turns → index on the handoff axis of the transitions (None = summed)."""


@dataclass(frozen=True)
class _FitInput:
    """What one fit (a rule, or ``all``) needs: Δ sums, cluster sums and by-depth counts."""

    sums: PairSums
    clusters: np.ndarray  # (K + 2, K, 4)
    passes: np.ndarray  # (P, K, D), every prefix
    fails: np.ndarray
    transitions: np.ndarray  # (K, 3, 2, 2)
    prefix_sums: PairSums | None = None  # A→B against A's baseline (shadow comparison only)


def run_refit(
    counts: Counts,
    *,
    buckets: DepthBuckets,
    settings: RefitConfig,
    source: str = "local",
    now: float | None = None,
    window_s: float | None = None,
    exact: bool = False,
    repair: bool = False,
) -> RefitResult:
    """See ``handoffmon.refit.refit``."""
    with single_threaded_blas():
        return _run(counts, buckets, settings, source, now, window_s, exact, repair)


def _run(
    counts: Counts,
    buckets: DepthBuckets,
    settings: RefitConfig,
    source: str,
    now: float | None,
    window_s: float | None,
    exact: bool,
    repair: bool = False,
) -> RefitResult:
    cells = build_cells(counts, buckets, max_models=settings.max_models, max_rules=settings.max_rules)
    checked = check_cells(cells, source=source, exact=exact, windowed=window_s is not None, repair=repair)
    cells = checked.cells
    if checked.repaired:
        log.warning(
            "handoffmon refit: %s: %d cell(s) with contradictory cluster sums read conservatively "
            "(input_repairs in the result), first %s %s->%s: %s",
            source,
            checked.repaired,
            checked.repairs[0].rule,
            checked.repairs[0].prefix_model,
            checked.repairs[0].model,
            ", ".join(checked.repairs[0].violated),
        )
    shadow = check_shadow(
        shadow_cells(counts.shadow),
        source=source,
        exact=exact,
        windowed=window_s is not None,
        min_pairs=settings.min_n,
        repair=repair,
    )
    if shadow.repaired:
        first = shadow.repairs[0]
        log.warning(
            "handoffmon refit: %s: %d shadow pair cell(s) with contradictory cluster sums read "
            "conservatively (shadow_input_repairs in the result), first %s %s->%s: %s",
            source, shadow.repaired, first.rule, first.prefix_model, first.model, ", ".join(first.violated),
        )  # fmt: skip
    fitter = _RuleFitter(cells, buckets, settings, shadow.cells)
    fits: dict[str, RuleFit] = {}
    pooled: _FitInput | None = None
    for i, rule in enumerate(cells.rules):
        inp = fitter.rule_input(cells.rule_arrays(i))
        fits[rule] = fitter.fit(rule, inp)
        pooled = inp if pooled is None else _add(pooled, inp)
    if pooled is not None:
        pooled = _FitInput(
            pooled.sums,
            cells.cluster_array(len(cells.rules)),
            pooled.passes,
            pooled.fails,
            pooled.transitions,
            pooled.prefix_sums,
        )
        fits[ALL_RULES] = fitter.fit(ALL_RULES, pooled)
    else:
        fits[ALL_RULES] = RuleFit(ALL_RULES, float("nan"), float("nan"), float("nan"), float("nan"), 0)
    return RefitResult(
        created_at=time.time() if now is None else float(now),
        source=source,
        observational=True,
        note=OBSERVATIONAL_NOTE + _routing_warning(fits) + _repair_note(checked.repaired, shadow.repaired),
        rules=fits,
        confidence=settings.confidence,
        min_n=settings.min_n,
        prior_sd_pp=settings.prior_sd_pp,
        buckets=buckets.labels,
        window_s=window_s,
        fdr=settings.fdr,
        markov_min_transitions=settings.markov_min_transitions,
        clustered=cells.clustered,
        clean_baseline=cells.clean_baseline,
        depth_adjusted=cells.depth_sums,
        excluded_models=cells.excluded_models,
        excluded_rules=cells.excluded_rules,
        switch_cost_note=SWITCH_COST_NOTE if fitter.shadow else "",
        prior=settings.prior,
        input_repairs=checked.repairs,
        input_repaired_cells=checked.repaired,
        shadow_input_repairs=shadow.repairs,
        shadow_input_repaired_cells=shadow.repaired,
    )


def _repair_note(repaired: int, shadow_repaired: int) -> str:
    """The note's sentences on cells and shadow pair cells whose cluster sums were repaired."""
    cells = REPAIR_NOTE.format(cells=repaired) if repaired else ""
    return cells + (SHADOW_REPAIR_NOTE.format(cells=shadow_repaired) if shadow_repaired else "")


def _routing_warning(fits: dict[str, RuleFit]) -> str:
    """The note's warning when a fit saw handoffs follow failed checks (else empty)."""
    flagged = {r: f for r, f in fits.items() if f.verdict_routing}
    if not flagged:
        return ""
    worst = max(f.handoff_after_fail_ratio for f in flagged.values())
    return VERDICT_ROUTING_NOTE.format(ratio=worst, rules=", ".join(sorted(flagged)))


def _add(a: _FitInput, b: _FitInput) -> _FitInput:
    prefix = None if a.prefix_sums is None or b.prefix_sums is None else a.prefix_sums + b.prefix_sums
    return _FitInput(
        a.sums + b.sums, a.clusters, a.passes + b.passes, a.fails + b.fails, a.transitions + b.transitions,
        prefix,
    )  # fmt: skip


class _RuleFitter:
    """Fits one rule (or the pooled ``all``) against the shared model list."""

    def __init__(
        self,
        cells: CellArrays,
        buckets: DepthBuckets,
        settings: RefitConfig,
        shadow: dict[str, dict[tuple[str, str], np.ndarray]],
    ) -> None:
        self.cells = cells
        self.shadow = shadow
        self.buckets = buckets
        self.settings = settings
        self.z = z_value(settings.confidence)

    def rule_input(self, arr: RuleArrays) -> _FitInput:
        sums = pair_sums(arr, adjust_depth=self.cells.depth_sums)
        prefix = None
        if self.shadow:  # the like-for-like observational contrast for the switch costs
            prefix = pair_sums(swap_roles(arr), adjust_depth=self.cells.depth_sums)
        return _FitInput(sums, arr.clusters, arr.passes, arr.fails, arr.transitions, prefix)

    def fit(self, rule: str, inp: _FitInput) -> RuleFit:
        s = self.settings
        dt = deltas(inp.sums, inp.clusters, self.z, s.min_n, s.fdr)
        dec = decompose(
            dt.delta,
            dt.var,
            dt.reported,
            s.ridge,
            block_cov=_block(dt),
            turns=dt.n_used.astype(float),
            adaptive=s.prior == "empirical",
        )
        markov = self._markov(rule, inp, dt)
        routing = verdict_routing(inp.transitions, dt.deff_b[0] if len(dt.deff_b) else dt.deff_b, self.z)
        return RuleFit(
            rule=rule,
            mu=dec.mu,
            mu_se=dec.mu_se,
            r2=dec.r2,
            r2_unweighted=dec.r2_unweighted,
            n_pairs=dec.n_pairs,
            models=model_scores(self.cells.models, dec, dt.n_used, dt.reported, dt.into),
            pairs=pair_effects(rule, self.cells.models, _pair_arrays(dt), dec),
            markov=markov["all"][0],
            markov_handoff_turns=markov["handoff"][0],
            markov_same_author=markov["same_author"][0],
            curves=self._curves(rule, inp, markov["all"][1]),
            cells=self._cells(rule, inp) if rule == ALL_RULES else [],
            r2_adjusted=dec.r2_adjusted,
            dispersion=dec.dispersion,
            switch_costs=self._switch_costs(rule, inp),
            prior_sd_pi_pp=100.0 * dec.prior_sd[0],
            prior_sd_sigma_pp=100.0 * dec.prior_sd[1],
            handoff_after_fail_ratio=routing.ratio,
            handoff_after_fail_ci=(routing.ci_low, routing.ci_high),
            verdict_routing=routing.flagged,
        )

    def _switch_costs(self, rule: str, inp: _FitInput) -> list[SwitchCost]:
        s = self.settings
        observational = None
        if inp.prefix_sums is not None:
            observational = deltas(inp.prefix_sums, swap(inp.clusters), self.z, s.min_n, s.fdr)
        cells = self.shadow.get(rule, {})
        return switch_costs(rule, cells, self.cells.models, observational, z=self.z, min_n=s.min_n, fdr=s.fdr)

    def _cells(self, rule: str, inp: _FitInput) -> list[CellAdherence]:
        x, n = inp.passes, inp.passes + inp.fails  # (P, K, D)
        a_idx, b_idx = np.nonzero(n.sum(axis=-1))
        x, n = x[a_idx, b_idx], n[a_idx, b_idx]
        lo, hi = wilson(x, n, self.z)
        with np.errstate(invalid="ignore", divide="ignore"):
            adh = np.where(n > 0, x / n, np.nan)
        prefixes, models = self.cells.prefixes, self.cells.models
        counts = n.astype(np.int64)  # whole counts (sums of integer weights): int() of each, at once
        rows = zip(a_idx.tolist(), b_idx.tolist(), *(v.tolist() for v in (counts, adh, lo, hi)), strict=True)
        return [
            CellAdherence(prefixes[a], models[b], rule, tuple(nl), tuple(al), tuple(ll), tuple(hl))
            for a, b, nl, al, ll, hl in rows
        ]

    def _observed(self, inp: _FitInput) -> tuple[np.ndarray, np.ndarray]:
        """(K, D) passes and checked turns of each model over every prefix."""
        p, f = inp.passes.sum(axis=0), inp.fails.sum(axis=0)
        return p, p + f

    def _markov(
        self, rule: str, inp: _FitInput, dt: DeltaTable
    ) -> dict[str, tuple[dict[str, MarkovFit], np.ndarray]]:
        k = len(self.cells.models)
        x, n = self._observed(inp)
        with np.errstate(invalid="ignore", divide="ignore"):
            initial = x[:, 0] / n[:, 0] if n.shape[1] else np.full(k, np.nan)
        start, first = curve_start(x, n)  # depth 1's adherence, or a fallback's first bucket's
        deff = self._transition_deff(inp, dt) if k else np.zeros(0)
        out = {}
        for name, h in _TURNS:
            trans = inp.transitions.sum(axis=1) if h is None else inp.transitions[:, h]
            ma = fit_markov(trans, self.z, deff=deff, min_from=self.settings.markov_min_transitions)
            curve = implied_curve(start, ma.p_tf, ma.p_ft, self.buckets.edges, first)
            ll, mse = curve_losses(curve, x, n)
            from_counts = trans.astype(np.int64).sum(axis=2)  # (K, 2): out of pass, out of fail
            ok = (np.isfinite(ma.p_tf) & np.isfinite(ma.p_ft)).tolist()
            cols = [v.tolist() for v in (initial, ll, mse, from_counts[:, 0], from_counts[:, 1])]
            ma_cols = [getattr(ma, f).tolist() for f in _MARKOV_COLUMNS]
            # one row tuple per model by a single zip, not a list built per model
            rows = zip(self.cells.models, ok, zip(*ma_cols, strict=True), *cols, strict=True)
            fits = {m: _markov_fit(m, rule, name, row, *rest) for m, good, row, *rest in rows if good}
            out[name] = (fits, curve)
        return out

    def _transition_deff(self, inp: _FitInput, dt: DeltaTable) -> np.ndarray:
        """(K,) design effect of each model's transition counts (``markov.transition_design_effect``)."""
        k = len(self.cells.models)
        diag = np.arange(k)
        t = inp.transitions.sum(axis=1).astype(float)  # (K, from, to), every turn
        with np.errstate(invalid="ignore", divide="ignore"):
            p_tf = t[:, 0, 1] / t[:, 0].sum(axis=-1)
            p_ft = t[:, 1, 0] / t[:, 1].sum(axis=-1)
            size = inp.clusters[diag, diag, 3] / inp.sums.base_n  # Σn²/N of the clean baseline
        return transition_design_effect(dt.deff_b[0], size, p_tf, p_ft)

    def _curves(self, rule: str, inp: _FitInput, fitted: np.ndarray) -> dict[str, DepthCurve]:
        x, n = self._observed(inp)
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


def _pair_arrays(dt: DeltaTable) -> PairArrays:
    return PairArrays(
        dt.n, dt.delta, np.sqrt(dt.var), dt.ci_low, dt.ci_high, dt.reported, dt.coverage,
        dt.p_value, dt.p_adjusted, dt.significant, dt.deff_h,
    )  # fmt: skip


def _block(dt: DeltaTable):  # type: ignore[no-untyped-def]
    """The decomposition's per-suffix covariance callback, or None (independent pairs)."""
    cov = dt.block_cov
    if cov is None or isinstance(cov, LowRankBlocks):
        return cov

    def block(b: int, a: np.ndarray) -> np.ndarray:
        return np.asarray(cov[b][np.ix_(a, a)])

    return block


_MARKOV_COLUMNS = (
    "p_tf", "p_tf_lo", "p_tf_hi", "p_ft", "p_ft_lo", "p_ft_hi",
    "stationary", "stationary_lo", "stationary_hi", "half_life", "n_transitions",
)  # fmt: skip


def _markov_fit(
    model: str, rule: str, turns: str, ma: Sequence[float], initial: float, ll: float, mse: float,
    from_pass: int, from_fail: int,
) -> MarkovFit:  # fmt: skip
    """One model's ``MarkovFit`` from its row of ``MarkovArrays`` (``_MARKOV_COLUMNS`` order,
    already Python numbers: one ``tolist`` per column instead of ~15 scalar reads per model)."""
    p_tf, p_tf_lo, p_tf_hi, p_ft, p_ft_lo, p_ft_hi, st, st_lo, st_hi, half_life, n_trans = ma
    return MarkovFit(
        model=model,
        rule=rule,
        p_tf=float(p_tf),
        p_tf_ci=(float(p_tf_lo), float(p_tf_hi)),
        p_ft=float(p_ft),
        p_ft_ci=(float(p_ft_lo), float(p_ft_hi)),
        stationary=float(st),
        stationary_ci=(float(st_lo), float(st_hi)),
        half_life_turns=float(half_life),
        log_loss=float(ll),
        mse=float(mse),
        n_transitions=int(n_trans),
        initial=float(initial),
        turns=turns,
        n_from_pass=int(from_pass),
        n_from_fail=int(from_fail),
    )
