"""Switch costs in the refit: paired estimate, like-for-like observational contrast, JSON."""

from __future__ import annotations

import pytest

from handoffmon.config import RefitConfig
from handoffmon.counts import CheckKey, Counts, ShadowKey
from handoffmon.depth import DepthBuckets
from handoffmon.refit import RefitResult, refit


def _counts(shadow: bool) -> Counts:
    checks = {
        CheckKey("r", "b", "a", "2", "pass"): 60, CheckKey("r", "b", "a", "2", "fail"): 40,
        CheckKey("r", "a", "a", "2", "pass"): 90, CheckKey("r", "a", "a", "2", "fail"): 10,
        CheckKey("r", "b", "b", "2", "pass"): 50, CheckKey("r", "b", "b", "2", "fail"): 50,
    }  # fmt: skip
    table = {"both_pass": 30, "model_only": 5, "prefix_only": 25, "both_fail": 40, "handoff_arm": 100}
    pairs = {ShadowKey("r", "a", "b", k): v for k, v in table.items()}
    base = {k: v for k, v in checks.items() if k.model == k.prefix_model}
    return Counts(checks=checks, baseline_checks=base, shadow=pairs if shadow else {})


def test_estimate_and_the_like_for_like_observational_contrast() -> None:
    """Estimate = (b − c)/n; observational = s(A→B) − s(A→A), not Δ = s(A→B) − s(B→B)."""
    res = refit(_counts(True), buckets=DepthBuckets(), settings=RefitConfig(min_n=20))
    fit = res.rules["r"]
    sc = fit.switch_cost("a", "b")
    assert sc is not None and sc.n_pairs == 100 and sc.handoff_pairs == 100
    assert sc.estimate == pytest.approx(-0.2)
    assert sc.model_adherence == pytest.approx(0.35) and sc.prefix_adherence == pytest.approx(0.55)
    assert sc.ci_low < -0.2 < sc.ci_high < 0 and sc.significant
    assert sc.observational == pytest.approx(0.6 - 0.9)
    assert sc.observational_ci_low < -0.3 < sc.observational_ci_high
    pair = fit.pair("a", "b")
    assert pair is not None and pair.delta == pytest.approx(0.6 - 0.5)
    assert not sc.disagree  # −0.2 vs −0.3 with ~100 turns each is within noise
    assert "s(A->A)" in res.switch_cost_note
    pooled = res.rules["all"].switch_cost("a", "b")
    assert pooled is not None and pooled.estimate == pytest.approx(-0.2)


def test_no_shadow_data_no_switch_costs() -> None:
    """Without shadow counters the table is empty and the note blank (never invented)."""
    res = refit(_counts(False), buckets=DepthBuckets(), settings=RefitConfig(min_n=20))
    assert res.rules["r"].switch_costs == [] and res.switch_cost_note == ""


def test_below_min_n_is_not_estimated() -> None:
    """Pairs under ``min_n`` keep their count but get no estimate and no test."""
    res = refit(_counts(True), buckets=DepthBuckets(), settings=RefitConfig(min_n=200))
    sc = res.rules["r"].switch_cost("a", "b")
    assert sc is not None and sc.n_pairs == 100 and sc.estimate != sc.estimate and not sc.significant


def test_json_round_trip() -> None:
    """The switch costs survive the versioned JSON document."""
    res = refit(_counts(True), buckets=DepthBuckets(), settings=RefitConfig(min_n=20))
    back = RefitResult.from_json(res.to_json())
    assert back.rules["r"].switch_costs == res.rules["r"].switch_costs
    assert back.switch_cost_note == res.switch_cost_note
