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


def test_pairs_from_few_conversations_use_the_t_reference() -> None:
    """The same 2×2 table from 100 one-pair conversations and from 4 conversations of 25 pairs
    (discordance spread evenly, so the design effects are alike): the second rests on 3
    degrees of freedom, so its interval is wider and its p-value larger, and the interval
    still excludes 0 exactly when p < 0.05."""
    table = {"both_pass": 30, "model_only": 5, "prefix_only": 25, "both_fail": 40, "handoff_arm": 100}

    def switch_cost(per_conversation: list[tuple[int, int, int]]):  # type: ignore[no-untyped-def]
        sums = dict.fromkeys(("conversations", "b2", "c2", "bc", "bn", "cn", "n2"), 0)
        for b, c, n in per_conversation:  # discordant b, c among n pairs
            for k, v in zip(sums, (1, b * b, c * c, b * c, b * n, c * n, n * n), strict=True):
                sums[k] += v
        shadow = {ShadowKey("r", "a", "b", k): v for k, v in {**table, **sums}.items()}
        shadow.update({ShadowKey("all", "a", "b", k): v for k, v in sums.items()})
        base = _counts(False)
        counts = Counts(checks=base.checks, baseline_checks=base.baseline_checks, shadow=shadow)
        fit = refit(counts, buckets=DepthBuckets(), settings=RefitConfig(min_n=20)).rules["r"]
        sc = fit.switch_cost("a", "b")
        assert sc is not None and sc.estimate == pytest.approx(-0.2)
        return sc

    singles = [(1, 0, 1)] * 5 + [(0, 1, 1)] * 25 + [(0, 0, 1)] * 70
    many, few = switch_cost(singles), switch_cost([(1, 6, 25), (1, 6, 25), (1, 6, 25), (2, 7, 25)])
    assert few.design_effect < 2 * many.design_effect
    assert few.ci_high - few.ci_low > 1.3 * (many.ci_high - many.ci_low)
    assert few.p_value > 10 * many.p_value
    for sc in (many, few):
        assert (sc.p_value < 0.05) == (sc.ci_high < 0 or sc.ci_low > 0)
