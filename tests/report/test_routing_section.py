"""The report's "Adherence saved by reordering" section."""

from __future__ import annotations

from handoffmon.depth import DepthBuckets
from handoffmon.refit import refit
from handoffmon.report import render_report
from handoffmon.routing.compare import ArmTotals, RoutingComparison
from handoffmon.sim import make_fleet
from handoffmon.sim.offline import simulate_counts


def test_section_shows_estimate_interval_prediction_and_cost_only_when_given() -> None:
    result = refit(simulate_counts(make_fleet(2), 30, seed=1), buckets=DepthBuckets(), now=0.0)
    cmp = RoutingComparison(
        300,
        ArmTotals(2184, 172, 688, 553, fallback_attempts=172),
        ArmTotals(2184, 171, 684, 572, fallback_attempts=171),
        3.2,
        1.5,
        5.2,
        1.9,
        decisions={"reordered": 309, "unchanged": 1575, "error": 0},
    )
    page = render_report(result, reordering=cmp)
    section = page[page.index('id="reordering"') :]
    for text in (
        "Adherence saved by reordering",
        "+3.2 pp",
        "[+1.5 pp, +5.2 pp]",
        "+1.9 pp",
        "-1 fallback attempts",
        "reordered 309",
        "80.4%",
        "83.6%",
    ):
        assert text in section, text
    assert "error 0" not in section
    assert 'id="reordering"' not in render_report(result)
