"""Refit result → gauge series (metric name → label values → value), shared by Prometheus and OTel."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from handoffmon.labels import OTHER, LabelGuard

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.refit.result import MarkovFit, RefitResult, RuleFit

Series = dict[tuple[str, ...], float]
"""Label values (in the gauge's label order) → value."""


@dataclass(frozen=True)
class GaugeSpec:
    """One refit gauge: name, label names, help text."""

    name: str
    labels: tuple[str, ...]
    help: str


FIT_LABEL = "fit"
"""The label every refit gauge carries last: who fitted the values (``LOCAL`` or ``POOLED``)."""
LOCAL = "local"
"""``fit`` of a process's own periodic refit over the counts it holds (a replica's share)."""
POOLED = "pooled"
"""``fit`` of a refit job (``handoffmon refit --pushgateway / --metrics-file``) over the
deployment's counts, pooled over its replicas. The alert rules stand on it where it is fresh."""
FITS = (LOCAL, POOLED)

_SPECS: tuple[GaugeSpec, ...] = (
    GaugeSpec(
        "handoffmon_prefix_influence",
        ("model", "rule"),
        "Refit: prefix influence pi of a model, relative to the average prefix (pi sums to zero); "
        "absent when the model was never a prefix in a fitted pair.",
    ),
    GaugeSpec(
        "handoffmon_suffix_susceptibility",
        ("model", "rule"),
        "Refit: suffix susceptibility sigma, relative to the average suffix (sigma sums to zero; "
        "alert on handoffmon_handoff_delta_into instead); absent when not estimable.",
    ),
    GaugeSpec(
        "handoffmon_prefix_influence_stderr",
        ("model", "rule"),
        "Refit: standard error of the prefix influence pi.",
    ),
    GaugeSpec(
        "handoffmon_suffix_susceptibility_stderr",
        ("model", "rule"),
        "Refit: standard error of the suffix susceptibility sigma.",
    ),
    GaugeSpec(
        "handoffmon_handoff_delta_into",
        ("model", "rule", "bound"),
        "Refit: Delta of every handoff into a model (any prefix) against its clean same-author "
        "baseline at the same depths (absolute), with its interval bounds (lower, upper).",
    ),
    GaugeSpec(
        "handoffmon_handoff_into_significant",
        ("model", "rule"),
        "Refit: 1 if the Delta of every handoff into the model is significant after "
        "Benjamini-Hochberg across the rule's models (refit.fdr), else 0 (models with a Delta into "
        "them only).",
    ),
    GaugeSpec(
        "handoffmon_handoff_risk",
        ("prefix_model", "model", "rule"),
        "Refit: fitted handoff risk mu + pi_prefix + sigma_model, also for unobserved pairs.",
    ),
    GaugeSpec(
        "handoffmon_handoff_risk_stderr",
        ("prefix_model", "model", "rule"),
        "Refit: standard error of the fitted handoff risk.",
    ),
    GaugeSpec(
        "handoffmon_handoff_delta",
        ("prefix_model", "model", "rule", "bound"),
        "Refit: depth-adjusted handoff effect Delta(A->B) (observational) and its conversation-clustered "
        "interval bounds.",
    ),
    GaugeSpec(
        "handoffmon_handoff_significant",
        ("prefix_model", "model", "rule"),
        "Refit: 1 if Delta(A->B) is significant after Benjamini-Hochberg across the rule's pairs "
        "(refit.fdr), else 0 (observed pairs only).",
    ),
    GaugeSpec(
        "handoffmon_handoff_checked_turns",
        ("prefix_model", "model", "rule"),
        "Refit: checked turns (pass+fail) in the handoff cell A->B that Delta was estimated from.",
    ),
    GaugeSpec(
        "handoffmon_stationary_adherence",
        ("model", "rule", "after_handoff"),
        "Refit: Markov long-run adherence p_FT/(p_TF+p_FT) of the chain fitted on all transitions "
        "(after_handoff=all), on transitions into same-author turns (false), or into handoff turns "
        "(true: the long-run level of a chain in which every turn is a handoff).",
    ),
    GaugeSpec(
        "handoffmon_adherence_half_life_turns",
        ("model", "rule", "after_handoff"),
        "Refit: turns for adherence to move halfway to its stationary value (+Inf: never).",
    ),
    GaugeSpec("handoffmon_refit_mu", ("rule",), "Refit: mu, the average handoff effect over ordered pairs."),
    GaugeSpec(
        "handoffmon_refit_r2",
        ("rule",),
        "Refit: weighted R^2 of Delta ~ mu + pi + sigma, adjusted for the fit's effective "
        "degrees of freedom.",
    ),
    GaugeSpec(
        "handoffmon_handoff_after_fail_ratio",
        ("rule", "bound"),
        "Refit: handoff rate of the turn after a failed check over the rate after a passed one, "
        "with its conversation-clustered interval bounds (lower, upper); near 1 when routing is "
        "blind to verdicts.",
    ),
    GaugeSpec(
        "handoffmon_verdict_routing",
        ("rule",),
        "Refit: 1 if handoffs follow failed checks (the lower bound of "
        "handoffmon_handoff_after_fail_ratio exceeds 1.25), else 0: Delta and the handoff risk of "
        "the rule are then biased negative.",
    ),
    GaugeSpec(
        "handoffmon_refit_last_success_timestamp_seconds",
        (),
        "UNIX time of the last successful refit (absent until a refit succeeded).",
    ),
    GaugeSpec(
        "handoffmon_switch_cost",
        ("prefix_model", "model", "rule", "bound"),
        "Refit: experimental switch cost of leaving prefix model A for model B (B's minus A's "
        "adherence continuing the same prefixes, from shadow pairs), with its interval bounds.",
    ),
    GaugeSpec(
        "handoffmon_switch_cost_significant",
        ("prefix_model", "model", "rule"),
        "Refit: 1 if the switch cost is significant after Benjamini-Hochberg across the rule's "
        "switch costs (refit.fdr), else 0.",
    ),
    GaugeSpec(
        "handoffmon_switch_cost_pairs",
        ("prefix_model", "model", "rule"),
        "Refit: shadow pairs (both continuations checked pass or fail) behind the switch cost.",
    ),
    GaugeSpec(
        "handoffmon_switch_cost_disagrees",
        ("prefix_model", "model", "rule"),
        "Refit: 1 if the shadow switch cost and the observational s(A->B) - s(A->A) of the same "
        "pair differ by more than their combined interval allows (the handoff cell is likely "
        "confounded by routing), else 0.",
    ),
    GaugeSpec(
        "handoffmon_refit_input_repaired_cells",
        (),
        "Refit: cells whose conversation-cluster sums contradicted their checks and were read "
        "conservatively (wider intervals; damaged or racing input, see the result's input_repairs); "
        "0 when none.",
    ),
)

REFIT_GAUGES: tuple[GaugeSpec, ...] = tuple(
    GaugeSpec(spec.name, (*spec.labels, FIT_LABEL), spec.help) for spec in _SPECS
)
"""Every refit gauge; the last label, ``fit``, says who fitted it (``LOCAL``, ``POOLED``)."""

_AFTER_HANDOFF = (("all", "markov"), ("true", "markov_handoff_turns"), ("false", "markov_same_author"))


def _put(series: Series, key: tuple[str, ...], value: float) -> None:
    """Store a finite or infinite value; NaN means "not estimated" and is left out."""
    if not math.isnan(value):
        series[key] = float(value)


class _Builder:
    """Accumulates series while guarding labels; names overflowing into ``other`` are skipped."""

    def __init__(self, guard: LabelGuard) -> None:
        self.guard = guard
        self.out: dict[str, Series] = {spec.name: {} for spec in _SPECS}

    def model(self, name: str) -> str | None:
        label = self.guard.model(name)
        return None if label == OTHER and name != OTHER else label

    def add_rule(self, rule: str, fit: RuleFit) -> None:
        _put(self.out["handoffmon_refit_mu"], (rule,), fit.mu)
        _put(self.out["handoffmon_refit_r2"], (rule,), fit.r2_adjusted)
        ratio = self.out["handoffmon_handoff_after_fail_ratio"]
        _put(ratio, (rule, "estimate"), fit.handoff_after_fail_ratio)
        _put(ratio, (rule, "lower"), fit.handoff_after_fail_ci[0])
        _put(ratio, (rule, "upper"), fit.handoff_after_fail_ci[1])
        if not math.isnan(fit.handoff_after_fail_ratio):
            self.out["handoffmon_verdict_routing"][(rule,)] = 1.0 if fit.verdict_routing else 0.0
        for name, scores in fit.models.items():
            m = self.model(name)
            if m is not None:
                _put(self.out["handoffmon_prefix_influence"], (m, rule), scores.prefix_influence)
                _put(self.out["handoffmon_suffix_susceptibility"], (m, rule), scores.suffix_susceptibility)
                _put(self.out["handoffmon_prefix_influence_stderr"], (m, rule), scores.prefix_influence_se)
                se = scores.suffix_susceptibility_se
                _put(self.out["handoffmon_suffix_susceptibility_stderr"], (m, rule), se)
                into = self.out["handoffmon_handoff_delta_into"]
                _put(into, (m, rule, "estimate"), scores.into_delta)
                _put(into, (m, rule, "lower"), scores.into_ci_low)
                _put(into, (m, rule, "upper"), scores.into_ci_high)
                if not math.isnan(scores.into_delta):
                    sig = self.out["handoffmon_handoff_into_significant"]
                    sig[(m, rule)] = 1.0 if scores.into_significant else 0.0
        for pair in fit.pairs:
            a, b = self.model(pair.prefix_model), self.model(pair.model)
            if a is None or b is None:
                continue
            _put(self.out["handoffmon_handoff_risk"], (a, b, rule), pair.risk)
            _put(self.out["handoffmon_handoff_risk_stderr"], (a, b, rule), pair.risk_se)
            if pair.observed and not math.isnan(pair.delta):
                delta = self.out["handoffmon_handoff_delta"]
                _put(delta, (a, b, rule, "estimate"), pair.delta)
                _put(delta, (a, b, rule, "lower"), pair.ci_low)
                _put(delta, (a, b, rule, "upper"), pair.ci_high)
                self.out["handoffmon_handoff_significant"][(a, b, rule)] = 1.0 if pair.significant else 0.0
                self.out["handoffmon_handoff_checked_turns"][(a, b, rule)] = float(pair.n)
        for flag, attr in _AFTER_HANDOFF:
            self.add_markov(rule, flag, getattr(fit, attr))
        for sc in fit.switch_costs:
            a, b = self.model(sc.prefix_model), self.model(sc.model)
            if a is None or b is None or math.isnan(sc.estimate):
                continue
            cost = self.out["handoffmon_switch_cost"]
            _put(cost, (a, b, rule, "estimate"), sc.estimate)
            _put(cost, (a, b, rule, "lower"), sc.ci_low)
            _put(cost, (a, b, rule, "upper"), sc.ci_high)
            self.out["handoffmon_switch_cost_significant"][(a, b, rule)] = 1.0 if sc.significant else 0.0
            self.out["handoffmon_switch_cost_pairs"][(a, b, rule)] = float(sc.n_pairs)
            self.out["handoffmon_switch_cost_disagrees"][(a, b, rule)] = 1.0 if sc.disagree else 0.0

    def add_markov(self, rule: str, flag: str, fits: Mapping[str, MarkovFit]) -> None:
        for name, mf in fits.items():
            m = self.model(name)
            if m is not None:
                _put(self.out["handoffmon_stationary_adherence"], (m, rule, flag), mf.stationary)
                _put(self.out["handoffmon_adherence_half_life_turns"], (m, rule, flag), mf.half_life_turns)


def refit_series(result: RefitResult, guard: LabelGuard, fit: str = LOCAL) -> dict[str, Series]:
    """Every refit gauge's series for one ``RefitResult``.

    Rule ``all`` carries the values pooled over rules. Values the refit could not
    estimate (NaN) are left out, so the series is absent rather than NaN. Models or
    rules beyond the label caps are left out (their ``other`` series would collide).

    Args:
        result: the refit.
        guard: the label guard shared with the counters.
        fit: who fitted it, the value of the last label ``fit`` of every series: ``LOCAL``
            (a process's periodic refit) or ``POOLED`` (a refit job over the deployment).

    Returns:
        Gauge name → {label values: value}, with an entry for every gauge in
        ``REFIT_GAUGES`` (possibly empty).
    """
    if fit not in FITS:
        raise ValueError(f"fit must be one of {FITS}, got {fit!r}")
    builder = _Builder(guard)
    for name, rule_fit in result.rules.items():
        rule = guard.rule(name)
        if rule == OTHER and name != OTHER:
            continue
        builder.add_rule(rule, rule_fit)
    builder.out["handoffmon_refit_last_success_timestamp_seconds"][()] = float(result.created_at)
    builder.out["handoffmon_refit_input_repaired_cells"][()] = float(result.input_repaired_cells)
    return {name: {(*key, fit): v for key, v in series.items()} for name, series in builder.out.items()}
