"""Long and hostile model names: charts keep their size, labels their full name, the page its layout."""

from __future__ import annotations

import html as html_lib
import re
from pathlib import Path
from typing import Any

import pytest

from handoffmon.depth import DepthBuckets
from handoffmon.refit import refit
from handoffmon.refit.result import RefitResult
from handoffmon.report import render_report
from handoffmon.report.svg import MAX_TICK_CHARS, tick_name
from handoffmon.sim.fleet import make_fleet
from handoffmon.sim.offline import simulate_counts
from tests.conftest import require_binary
from tests.evals.layout import chromium

ARN = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-5-sonnet-2024{}-v2:0"
"""A Bedrock inference-profile ARN (the name LiteLLM reports for such deployments): 97 characters."""


def _renamed(result: RefitResult, names: dict[str, str]) -> RefitResult:
    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return names.get(v, v)
        if isinstance(v, dict):
            return {walk(k): walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return RefitResult.from_dict(walk(result.to_dict()), source="test")


@pytest.fixture(scope="module")
def arn_refit() -> RefitResult:
    """12 models, every one named by a 97-character ARN that differs from the others at the end."""
    result = refit(
        simulate_counts(make_fleet(12, n_rules=1, seed=3), 400, seed=1), buckets=DepthBuckets(), now=0.0
    )
    return _renamed(result, {f"sim-{i:02d}": ARN.format(f"{i:02d}") for i in range(12)})


def _widths(page: str, kind: str) -> list[float]:
    return [float(w) for w in re.findall(rf'<svg class="chart {kind}" viewBox="0 0 ([\d.]+) ', page)]


def test_tick_names_keep_start_and_end_and_a_bidi_isolate_whole() -> None:
    """Short names pass unchanged; long ones keep MAX_TICK_CHARS characters, their start and
    their (distinguishing) end; an isolated right-to-left name stays isolated."""
    assert tick_name("gpt-4o") == "gpt-4o"
    short = tick_name(ARN.format("07"))
    assert len(short) == MAX_TICK_CHARS and short.startswith("arn:aws:be") and short.endswith("202407-v2:0")
    rtl = "\u2068" + "نموذج" * 20 + "\u2069"
    shown = tick_name(rtl)
    assert shown[0] == "\u2068" and shown[-1] == "\u2069" and len(shown) == MAX_TICK_CHARS + 2


def test_long_names_do_not_widen_every_column(arn_refit: RefitResult) -> None:
    """Twelve 97-character names: the heatmap and bubble charts were 9,235 px wide (each column
    as wide as the longest name); columns now keep their width and the labels are shortened,
    each with its full name as a tooltip."""
    page = render_report(arn_refit)
    heat, bubbles = _widths(page, "heatmap"), _widths(page, "bubbles")
    assert heat and bubbles and max(heat + bubbles) < 1_500
    ticks = re.findall(r'class="tick"[^>]*><title>([^<]*)</title>([^<]*)</text>', page)
    full = {html_lib.unescape(t) for t, _ in ticks}
    assert full == {ARN.format(f"{i:02d}") for i in range(12)}
    assert all(len(html_lib.unescape(s)) == MAX_TICK_CHARS for _, s in ticks)


def test_hostile_names_render_escaped_in_a_page_that_keeps_its_width(tmp_path: Path) -> None:
    """Markup, a 2,000-character name and a right-to-left override as model names: no markup
    gets through, and in headless Chromium the page is no wider than the window and the
    heatmap's card scrolls over less than 2,000 px (it was 126,180 px with one such name)."""
    binary = require_binary("chromium")
    result = refit(
        simulate_counts(make_fleet(8, n_rules=1, seed=3), 300, seed=1), buckets=DepthBuckets(), now=0.0
    )
    hostile = {
        "sim-00": "<script>alert(1)</script>",
        "sim-01": '"><img src=x onerror=alert(2)>',
        "sim-02": "W" * 2_000,
        "sim-03": "\u202eevil",
    }
    page = render_report(_renamed(result, hostile))
    assert page.count("<script") == 1 and "<img" not in page  # the report's own script only
    probe = (
        "<script>addEventListener('load',()=>{const c=document.querySelector('.chart.heatmap')"
        ".closest('.card');document.body.dataset.page=document.documentElement.scrollWidth;"
        "document.body.dataset.heat=c.scrollWidth;});</script>"
    )
    path = tmp_path / "report.html"
    path.write_text(page.replace("</body>", probe + "</body>"), encoding="utf-8")
    dom = chromium(
        binary,
        tmp_path / "profile",
        "--virtual-time-budget=3000",
        "--dump-dom",
        path.as_uri(),
        window="1400,1200",
    ).stdout
    page_w = re.search(r'data-page="(\d+)"', dom)
    heat_w = re.search(r'data-heat="(\d+)"', dom)
    assert page_w and heat_w, dom[-500:]
    assert int(page_w.group(1)) <= 1400
    assert int(heat_w.group(1)) < 2_000
    assert 'id="report-ready"' in dom


def test_names_alike_at_both_ends_get_labels_that_tell_them_apart(tmp_path: Path) -> None:
    """A model's Bedrock profiles in two regions differ only mid-name: shortened to start and
    end they read alike in every chart (the shortening's own regression). They show where they
    differ instead, each label still MAX_TICK_CHARS long."""
    from handoffmon.report.svg import bubbles, tick_names

    us = ARN.format("06")
    eu = us.replace("us-east-1", "eu-west-1").replace("/us.", "/eu.")
    labels = tick_names([us, eu, "gpt-4o"])
    assert labels[us] != labels[eu] and "us-east" in labels[us] and "eu-west" in labels[eu]
    assert len(labels[us]) == len(labels[eu]) == MAX_TICK_CHARS and labels["gpt-4o"] == "gpt-4o"
    twins = tick_names(
        ["a" * 20 + "X" + "b" * 10 + "Y" + "c" * 30, "a" * 20 + "X" + "b" * 10 + "Z" + "c" * 30]
    )
    assert len(set(twins.values())) == 2
    chart = bubbles([us, eu], [us, eu], {(us, eu): 3})
    shown = re.findall(r'class="tick"[^>]*><title>[^<]*</title>([^<]*)</text>', chart)
    assert sorted(set(shown)) == sorted({labels[us], labels[eu]})
