"""The pair-risk table: built from a real refit, the shadow slot, same-author pairs."""

from __future__ import annotations

import math

import pytest

from handoffmon.depth import DepthBuckets
from handoffmon.errors import InputError
from handoffmon.refit import refit
from handoffmon.refit.result import RefitResult
from handoffmon.routing import PairRiskTable, ShadowCost
from handoffmon.routing.table import SAME_AUTHOR, shadow_costs
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
