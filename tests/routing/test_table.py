"""The pair-risk table: built from a real refit, the shadow slot, same-author pairs."""

from __future__ import annotations

import math

import pytest

from handoffmon.depth import DepthBuckets
from handoffmon.errors import InputError
from handoffmon.refit import refit
from handoffmon.refit.result import CellAdherence, PairEffect, RefitResult, RuleFit
from handoffmon.routing import PairRiskTable, ShadowCost
from handoffmon.routing.table import NAN, SAME_AUTHOR, handoff_adherence, shadow_costs
from handoffmon.sim import default_fleet
from handoffmon.sim.offline import simulate_counts


@pytest.fixture(scope="module")
def result() -> RefitResult:
    return refit(simulate_counts(default_fleet(), 400, seed=5), buckets=DepthBuckets(), now=1000.0)


def test_table_carries_every_ordered_pair_of_the_pooled_fit(result: RefitResult) -> None:
    """Every off-diagonal pair of the ``all`` fit is in the table with the refit's risk, SE, Δ and flag."""
    table = PairRiskTable.from_refit(result)
    fit = result.rules["all"]
    assert len(table) == len(fit.pairs) == 6 * 5
    for p in fit.pairs:
        got = table.get(p.prefix_model, p.model)
        assert got is not None
        assert (got.risk, got.risk_se, got.n, got.significant) == (p.risk, p.risk_se, p.n, p.significant)
        assert table.score(p.prefix_model, p.model) == (p.risk, p.risk_se, "risk")
    assert table.created_at == 1000.0 and table.rule == "all"


def test_same_author_is_zero_and_unknown_models_are_none(result: RefitResult) -> None:
    """A→A is no handoff (0 ± 0); a model the refit never saw has no score."""
    table = PairRiskTable.from_refit(result)
    assert table.score("atlas", "atlas") == (0.0, 0.0, "same")
    assert table.get("atlas", "atlas") is SAME_AUTHOR
    assert table.score("atlas", "never-seen") is None


def test_per_rule_table_and_unknown_rule(result: RefitResult) -> None:
    """``routing.rule`` picks one rule's fit; a rule the refit lacks fails naming it."""
    rule = next(r for r in result.rules if r != "all")
    table = PairRiskTable.from_refit(result, rule=rule)
    p = result.rules[rule].pairs[0]
    assert table.score(p.prefix_model, p.model)[:2] == (p.risk, p.risk_se)  # type: ignore[index]
    with pytest.raises(InputError, match="nope"):
        PairRiskTable.from_refit(result, rule="nope")


def test_shadow_cost_takes_the_pair_slot(result: RefitResult) -> None:
    """A measured switch cost is the pair's score (kind ``shadow``); pairs without one keep the fitted risk;
    a shadow-only pair (never in the refit) is still scored."""
    costs = {
        ("atlas", "cedar"): ShadowCost(-0.12, 0.02, 80, True),
        ("atlas", "zed"): ShadowCost(0.01, 0.03, 40),
    }
    table = PairRiskTable.from_refit(result, switch_costs=costs)
    assert table.score("atlas", "cedar") == (-0.12, 0.02, "shadow")
    assert table.score("atlas", "zed") == (0.01, 0.03, "shadow")
    assert table.score("atlas", "birch")[2] == "risk"  # type: ignore[index]
    assert math.isnan(table.get("atlas", "zed").risk)  # type: ignore[union-attr]


def test_shadow_costs_from_issue_22_entries() -> None:
    """``switch_costs`` entries (dicts or objects) become ShadowCost with SE = half-width / z."""
    entries = [
        {
            "prefix_model": "a",
            "model": "b",
            "n_pairs": 50,
            "estimate": -0.1,
            "ci_low": -0.1 - 1.959964 * 0.03,
            "ci_high": -0.1 + 1.959964 * 0.03,
            "significant": True,
        },
        {"prefix_model": "a", "model": "c", "n_pairs": 5, "estimate": None, "ci_low": None, "ci_high": None},
    ]
    got = shadow_costs(entries)
    assert list(got) == [("a", "b")]
    assert got[("a", "b")].se == pytest.approx(0.03, rel=1e-5)
    assert got[("a", "b")].significant and got[("a", "b")].n_pairs == 50


def _fit(cells: list[tuple[str, str, tuple[int, ...], tuple[float, ...]]], deff: float = 1.0) -> RuleFit:
    """A pooled fit holding only what ``handoff_adherence`` reads: pairs (design effects) and cells."""
    pairs = [
        PairEffect("all", a, b, sum(n), NAN, NAN, NAN, NAN, False, NAN, NAN, True, design_effect=deff)
        for a, b, n, _ in cells
    ]
    cell_rows = [CellAdherence(a, b, "all", n, adh, adh, adh) for a, b, n, adh in cells]
    return RuleFit("all", NAN, NAN, NAN, NAN, 0, pairs=pairs, cells=cell_rows)


def test_handoff_adherence_is_standardized_to_the_prefix_models_depth_mix() -> None:
    """Two candidates for A's conversations, handed A's conversations at different depths: each
    cell's pass shares are weighted by A's whole handoff mix (here 100 shallow, 100 deep), so a
    candidate seen mostly deep is not penalized for depth; SE from p̃(1 − p̃)/n per bucket, times
    the design effect; a cell outside 80% of the mix, or under min_n, gets no score."""
    fit = _fit(
        [
            ("a", "b", (90, 10, 0), (0.9, 0.5, NAN)),  # mostly shallow
            ("a", "c", (10, 90, 0), (0.8, 0.6, NAN)),  # mostly deep
            ("a", "d", (0, 0, 40), (NAN, NAN, 0.7)),  # only a bucket A's mix barely has
            ("x", "b", (20, 0, 0), (0.5, NAN, NAN)),  # below min_n
        ],
        deff=2.0,
    )
    got = handoff_adherence(fit, min_n=30)
    assert set(got) == {("a", "b"), ("a", "c")}
    w = (100 / 240, 100 / 240)  # A's mix over buckets both cells cover: 100, 100 (and d's 40)
    # b and c cover the two shallow buckets = 200 / 240 = 83% of A's mix ≥ 80%; d covers 17%
    for key, n, p in ((("a", "b"), (90, 10), (0.9, 0.5)), (("a", "c"), (10, 90), (0.8, 0.6))):
        value, se = got[key]
        assert value == pytest.approx((w[0] * p[0] + w[1] * p[1]) / (w[0] + w[1]))
        var = 0.0
        for nd, pd in zip(n, p, strict=True):
            pt = (pd * nd + 0.5) / (nd + 1)
            var += (0.5**2) * pt * (1 - pt) / nd
        assert se == pytest.approx(math.sqrt(2.0 * var))
    assert got[("a", "b")][0] == pytest.approx(0.7) and got[("a", "c")][0] == pytest.approx(0.7)
    # the raw shares (0.86 vs 0.62) would have called b 24 pp better; at A's depths they are equal
    table = PairRiskTable.from_refit(RefitResult(0.0, "test", True, "", {"all": fit}, min_n=30), rule="all")
    cmp = table.compare("a", "c", "b")
    assert cmp is not None and cmp[2] == "adherence" and cmp[0] == pytest.approx(0.0)
