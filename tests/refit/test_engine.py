"""Full refit: planted π/σ recovery under depth confounding, pooling, result layout."""

from __future__ import annotations

import json

import numpy as np
import pytest

from handoffmon.config import RefitConfig
from handoffmon.counts import CheckKey, Counts
from handoffmon.depth import DepthBuckets
from handoffmon.refit import ALL_RULES, refit
from handoffmon.refit.threads import single_threaded_blas
from tests.refit.synth import plant, synth_counts

B7 = DepthBuckets((1, 2, 3, 5, 9, 17, 33))
"""The 7 buckets ``tests.refit.synth`` plants by default."""


@pytest.fixture(scope="module")
def planted_refit():  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(42)
    planted = plant(9, 3, rng)
    counts = synth_counts(planted, rng, buckets=B7)
    return planted, counts, refit(counts, buckets=B7, now=1000.0)


def _vec(fit, field: str, models: tuple[str, ...]) -> np.ndarray:  # type: ignore[no-untyped-def]
    return np.array([getattr(fit.models[m], field) for m in models])


def test_recovers_planted_pi_and_sigma_under_depth_confounding(planted_refit) -> None:  # type: ignore[no-untyped-def]
    """K = 9, 3 rules, handoffs concentrated at deep turns where adherence is lower:
    Pearson(π̂, π) ≥ 0.95 and Pearson(σ̂, σ) ≥ 0.95 for the pooled fit and μ̂ ≈ μ."""
    planted, _, result = planted_refit
    fit = result.rules[ALL_RULES]
    pi_hat = _vec(fit, "prefix_influence", planted.models)
    sigma_hat = _vec(fit, "suffix_susceptibility", planted.models)
    assert np.corrcoef(pi_hat, planted.pi)[0, 1] >= 0.95
    assert np.corrcoef(sigma_hat, planted.sigma)[0, 1] >= 0.95
    assert fit.mu == pytest.approx(planted.mu, abs=3 * fit.mu_se + 1e-3)
    assert fit.r2 > 0.8
    for rule in planted.rules:
        per_rule = result.rules[rule]
        assert np.corrcoef(_vec(per_rule, "prefix_influence", planted.models), planted.pi)[0, 1] >= 0.9


def test_depth_unadjusted_estimator_has_larger_error(planted_refit) -> None:  # type: ignore[no-untyped-def]
    """The same data refitted with one depth bucket (no depth adjustment) is biased:
    its Δ error is several times larger and its π/σ errors are larger too."""
    planted, counts, result = planted_refit
    truth = planted.mu + planted.pi[:, None] + planted.sigma[None, :]
    errors = {}
    for name, res in (("adjusted", result), ("raw", refit(counts, buckets=DepthBuckets((1,)), now=0))):
        fit = res.rules[ALL_RULES]
        d_err = [p.delta - truth[planted.models.index(p.prefix_model), planted.models.index(p.model)]
                 for p in fit.pairs if p.observed]  # fmt: skip
        errors[name] = (
            np.sqrt(np.mean(np.square(d_err))),
            np.sqrt(np.mean((_vec(fit, "prefix_influence", planted.models) - planted.pi) ** 2)),
            np.sqrt(np.mean((_vec(fit, "suffix_susceptibility", planted.models) - planted.sigma) ** 2)),
        )
    (d_adj, pi_adj, s_adj), (d_raw, pi_raw, s_raw) = errors["adjusted"], errors["raw"]
    assert d_raw > 3 * d_adj
    assert pi_raw > pi_adj and s_raw > s_adj


def test_every_ordered_pair_has_a_risk_and_observed_ones_a_delta(planted_refit) -> None:  # type: ignore[no-untyped-def]
    """K(K−1) pairs per rule; observed pairs carry Δ, CI, significance and residual."""
    _planted, _, result = planted_refit
    fit = result.rules[ALL_RULES]
    assert len(fit.pairs) == 9 * 8
    for p in fit.pairs:
        assert np.isfinite(p.risk) and p.risk_se > 0
        assert p.observed and p.ci_low < p.delta < p.ci_high
        assert p.p_adjusted >= p.p_value
        assert p.significant == (p.p_adjusted <= result.fdr)
        assert not p.significant or p.ci_low > 0 or p.ci_high < 0  # BH never flags what the interval keeps
        assert p.residual == pytest.approx(p.delta - p.risk)


def test_unobserved_pair_gets_risk_but_no_delta() -> None:
    """A pair with no handoff turns is reported with observed=False, NaN Δ and a finite risk."""
    rng = np.random.default_rng(3)
    planted = plant(4, 1, rng)
    counts = synth_counts(planted, rng, n_trans=20, buckets=B7)
    checks = {k: v for k, v in counts.checks.items() if not (k.prefix_model == "m00" and k.model == "m01")}
    result = refit(Counts(checks=checks, transitions=counts.transitions), buckets=B7)
    pair = result.rules["r0"].pair("m00", "m01")
    assert pair is not None and not pair.observed and pair.n == 0
    assert np.isnan(pair.delta) and np.isfinite(pair.risk)
    assert pair.risk == pytest.approx(planted.delta(0, 1), abs=4 * pair.risk_se)


def test_result_is_marked_observational_and_json_has_documented_layout(planted_refit) -> None:  # type: ignore[no-untyped-def]
    """observational=True with a note; JSON has mu, r2, models.*, pairs[], markov.* per rule and all."""
    _, _, result = planted_refit
    assert result.observational and "observational" in result.note
    doc = json.loads(result.to_json())
    assert doc["schema"] == "handoffmon.refit" and doc["version"] == 2
    for rule in ("r0", "r1", "r2", "all"):
        body = doc["rules"][rule]
        assert {"mu", "r2", "models", "pairs", "markov"} <= body.keys()
        assert {
            "prefix_influence",
            "prefix_influence_se",
            "suffix_susceptibility",
            "suffix_susceptibility_se",
        } <= (body["models"]["m03"].keys())
        assert {"prefix_model", "model", "n", "delta", "ci_low", "ci_high", "significant", "risk"} <= (
            body["pairs"][0].keys()
        )
        assert {"p_tf", "p_ft", "stationary", "half_life_turns", "log_loss", "mse"} <= body["markov"][
            "m03"
        ].keys()
    assert type(result).from_json(result.to_json()).to_json() == result.to_json()


def test_min_n_setting_hides_small_pairs() -> None:
    """Raising min_n above the cell sizes leaves every pair unobserved (risk NaN: nothing to fit)."""
    rng = np.random.default_rng(5)
    counts = synth_counts(plant(3, 1, rng), rng, n_pair=50, n_trans=5, buckets=B7)
    result = refit(counts, buckets=B7, settings=RefitConfig(min_n=1000))
    assert not any(p.observed for p in result.rules["r0"].pairs)
    assert result.rules["r0"].n_pairs == 0 and np.isnan(result.rules["r0"].mu)


def test_empty_counts_refit_to_an_empty_all_fit() -> None:
    """No data is not an error: one empty 'all' fit."""
    result = refit(Counts(), buckets=DepthBuckets())
    assert list(result.rules) == [ALL_RULES]
    assert result.rules[ALL_RULES].pairs == []


def test_depth_curve_reports_observed_adherence_with_wilson_bounds() -> None:
    """Curves hold per-bucket n, adherence and Wilson bounds of all the model's turns."""
    checks = {
        CheckKey("r", "b", "none", "1", "pass"): 9,
        CheckKey("r", "b", "none", "1", "fail"): 1,
        CheckKey("r", "b", "a", "3-4", "pass"): 2,
        CheckKey("r", "b", "b", "3-4", "fail"): 2,
    }
    curve = refit(Counts(checks=checks), buckets=B7).rules["r"].curves["b"]
    assert curve.n[:3] == (10, 0, 4)
    assert curve.adherence[0] == pytest.approx(0.9) and curve.adherence[2] == pytest.approx(0.5)
    assert curve.ci_low[0] < 0.9 < curve.ci_high[0]
    assert np.isnan(curve.adherence[1])


def test_a_rule_named_all_is_refused() -> None:
    """'all' is the pooled fit's key; a rule of that name would be silently overwritten."""
    from handoffmon.errors import InputError

    with pytest.raises(InputError, match="reserved"):
        refit(Counts(checks={CheckKey("all", "b", "a", "2", "pass"): 1}), buckets=DepthBuckets())


def _replicate_fit(planted, rng):  # type: ignore[no-untyped-def]
    counts = synth_counts(planted, rng, n_pair=150, n_diag=3000, n_first=50, n_trans=5, buckets=B7)
    return refit(counts, buckets=B7, settings=RefitConfig(prior_sd_pp=100), now=0).rules["r0"]


@pytest.mark.slow
def test_decomposition_intervals_are_calibrated_with_the_shared_baseline_modelled() -> None:
    """200 replicates, K = 6: 95% intervals of risk and of σ cover the planted values
    92–98% of the time. All Δ(·→B) share B's baseline; GLS on that covariance is what
    keeps σ's coverage nominal (plain WLS ignoring it gave 89% in the same setting)."""
    rng = np.random.default_rng(3)
    planted = plant(6, 1, rng)
    truth = planted.mu + planted.pi[:, None] + planted.sigma[None, :]
    off = ~np.eye(6, dtype=bool)
    risk_hits, sigma_hits = [], []
    with single_threaded_blas():  # as refit() does; threaded BLAS on tiny matrices crawls on busy hosts
        fits = [_replicate_fit(planted, rng) for _ in range(200)]
    for fit in fits:
        risk = np.full((6, 6), np.nan)
        risk_se = np.full((6, 6), np.nan)
        for p in fit.pairs:
            a, b = planted.models.index(p.prefix_model), planted.models.index(p.model)
            risk[a, b], risk_se[a, b] = p.risk, p.risk_se
        risk_hits.append((np.abs(risk - truth) <= 1.96 * risk_se)[off])
        sigma = _vec(fit, "suffix_susceptibility", planted.models)
        sigma_se = _vec(fit, "suffix_susceptibility_se", planted.models)
        sigma_hits.append(np.abs(sigma - planted.sigma) <= 1.96 * sigma_se)
    assert 0.92 <= np.mean(risk_hits) <= 0.98
    assert 0.92 <= np.mean(sigma_hits) <= 0.98


def test_cell_adherence_by_depth_with_wilson_intervals() -> None:
    """Every cell with checked turns (incl. the none prefix) is reported per bucket with Wilson bounds;
    the pooled 'all' cell sums the rules."""
    from handoffmon.refit.cells import wilson, z_value

    checks = {
        CheckKey("r1", "b", "a", "3-4", "pass"): 8,
        CheckKey("r1", "b", "a", "3-4", "fail"): 2,
        CheckKey("r2", "b", "a", "3-4", "pass"): 1,
        CheckKey("r2", "b", "a", "3-4", "fail"): 1,
        CheckKey("r1", "b", "none", "1", "pass"): 5,
        CheckKey("r1", "b", "a", "2", "not_applicable"): 7,
    }
    result = refit(Counts(checks=checks), buckets=B7)
    assert result.rules["r1"].cells == []  # per rule: curves only (cells grow as rules × K²)
    cells = {(c.prefix_model, c.model): c for c in result.rules["all"].cells}
    assert set(cells) == {("a", "b"), ("none", "b")}
    ab = cells[("a", "b")]
    assert ab.n == (0, 0, 12, 0, 0, 0, 0) and ab.adherence[2] == pytest.approx(0.75)
    lo, hi = wilson(np.array([9]), np.array([12]), z_value(0.95))
    assert (ab.ci_low[2], ab.ci_high[2]) == pytest.approx((lo[0], hi[0]))
    assert json.loads(result.to_json())["rules"]["all"]["cells"][0]["rule"] == "all"
