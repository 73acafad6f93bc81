"""The report's warning banners: verdict routing per tab and on the page, models left out of the fit."""

from __future__ import annotations

import dataclasses
import re

import pytest

from handoffmon.depth import DepthBuckets
from handoffmon.refit import refit
from handoffmon.refit.result import ALL_RULES, RefitResult
from handoffmon.report import render_report
from handoffmon.sim.counting import counts_from_rows
from handoffmon.sim.fleet import make_fleet
from handoffmon.sim.offline import simulate_counts
from tests.refit.verdict_routing import verdict_routed_rows


@pytest.fixture(scope="module")
def routed() -> RefitResult:
    """Escalate-on-failure routing (30% handoffs after a failed check, 8% after a pass)."""
    rows = verdict_routed_rows(3000, after_fail=0.3, after_pass=0.08, seed=1)
    return refit(counts_from_rows(rows, DepthBuckets()), buckets=DepthBuckets(), now=0.0)


def _sections(html: str) -> dict[str, str]:
    return {
        m.group(1): m.group(2)
        for m in re.finditer(
            r'<section class="rule[^"]*" id="rule-\d+" data-rule="([^"]+)"[^>]*>(.*?)</section>', html, re.S
        )
    }


def test_a_tab_whose_refit_flags_verdict_routing_opens_with_a_warning_naming_the_ratio(
    routed: RefitResult,
) -> None:
    """Each flagged fit's tab starts with an alert carrying its after-fail/after-pass ratio and interval."""
    flagged = {r for r, f in routed.rules.items() if f.verdict_routing}
    assert ALL_RULES in flagged  # the planted routing is strong enough to be flagged
    html = render_report(routed)
    sections = _sections(html)
    assert set(sections) == set(routed.rules)
    for rule, body in sections.items():
        fit = routed.rules[rule]
        lo, hi = fit.handoff_after_fail_ci
        expected = f"{fit.handoff_after_fail_ratio:.2f}× [{lo:.2f}, {hi:.2f}]"
        assert (expected in body and 'role="alert"' in body) == (rule in flagged)
    page_top = html.split('<nav class="tabs"')[0]
    assert "Verdict routing flagged" in page_top and 'role="alert"' in page_top


def test_an_unflagged_refit_shows_no_routing_warning() -> None:
    """Blind routing: no banner anywhere (the warning means something when it appears)."""
    result = refit(simulate_counts(make_fleet(3), 200, seed=1), buckets=DepthBuckets(), now=0.0)
    assert not any(f.verdict_routing for f in result.rules.values())
    html = render_report(result)
    assert 'role="alert"' not in html and "Verdict routing" not in html


def test_models_left_out_of_the_fit_are_named_escaped_and_bounded(routed: RefitResult) -> None:
    """refit.max_models cut: the page says which models it does not cover, at most 20 names, escaped."""
    names = ("<b>x</b>", *(f"extra-{i:02d}" for i in range(24)))
    html = render_report(dataclasses.replace(routed, excluded_models=names, excluded_rules=("r2",)))
    banner = html.split("25 models left out of the fit")[1].split("</div>")[0]
    assert "&lt;b&gt;x&lt;/b&gt;" in banner and "<b>x</b>" not in banner
    assert "extra-18" in banner and "extra-19" not in banner and "and 5 more" in banner
    assert "1 rule left out of the fit" in html and "r2" in html.split("1 rule left out")[1]
    assert "left out of the fit" not in render_report(routed)
