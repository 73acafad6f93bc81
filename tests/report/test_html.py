"""The HTML report: self-contained, every chart present, numbers from the refit, loads in Chromium."""

from __future__ import annotations

import itertools
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from handoffmon.depth import DepthBuckets
from handoffmon.refit import refit
from handoffmon.refit.result import ALL_RULES, RefitResult
from handoffmon.report import render_report
from handoffmon.report.svg import finite as svg_finite
from handoffmon.sim.fleet import default_fleet, make_fleet
from handoffmon.sim.offline import simulate_counts
from handoffmon.sim.truth import Truth
from tests.conftest import require_binary
from tests.evals.layout import chromium, console_errors


@pytest.fixture(scope="module")
def result() -> RefitResult:
    fleet = default_fleet()
    counts = simulate_counts(fleet, 500, seed=2)
    return refit(counts, buckets=DepthBuckets(), now=1_800_000_000.0, source="test")


@pytest.fixture(scope="module")
def truth() -> dict:
    return Truth.of(default_fleet()).to_dict()


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs.extend(attrs)


def test_page_is_self_contained_with_no_network_references(result: RefitResult) -> None:
    """No src/href pointing anywhere: scripts, styles and charts are inline."""
    html = render_report(result)
    parser = _Collector()
    parser.feed(html)
    linked = [v for k, v in parser.attrs if k in ("src", "href") and v and not v.startswith("#")]
    assert linked == []
    assert "<script>" in html and "<style>" in html and parser.tags.count("svg") > 10
    assert not re.search(r"https?://", html)


def test_one_tab_and_section_per_rule_with_pooled_first(result: RefitResult) -> None:
    """Tabs: 'all rules' then each rule; one section per fit, only the first visible."""
    html = render_report(result)
    rules = sorted(r for r in result.rules if r != ALL_RULES)
    tabs = re.findall(r'<button class="tab[^"]*" data-target="rule-(\d+)"[^>]*>([^<]+)</button>', html)
    assert [t[1] for t in tabs] == ["all rules", *rules]
    sections = re.findall(r'<section class="rule( hidden)?" id="rule-(\d+)"', html)
    assert [s[0] for s in sections] == ["", *[" hidden"] * len(rules)]


def test_heatmap_cells_and_significance_marks_come_from_the_refit(result: RefitResult) -> None:
    """Every observed off-diagonal pair of the pooled fit has a cell; ★ marks exactly the significant ones."""
    fit = result.rules[ALL_RULES]
    html = render_report(result)
    section = html.split('id="rule-0"')[1].split("</section>")[0]
    heat = section.split('class="chart heatmap"')[1].split("</svg>")[0]
    observed = [p for p in fit.pairs if p.observed]
    assert heat.count('<g class="cell') == len(observed)
    assert heat.count('<g class="cell sig">') == sum(p.significant for p in observed)
    worst = min(observed, key=lambda p: p.delta)
    assert f"{worst.prefix_model} → {worst.model}: Δ {100 * worst.delta:+.1f} pp" in heat


def test_truth_markers_only_when_truth_is_given(result: RefitResult, truth: dict) -> None:
    """Planted π/σ diamonds (2 per model per tab) and the recovery scatter appear only with a truth."""
    plain, with_truth = render_report(result), render_report(result, truth=truth)
    n_models, n_tabs = len(truth["models"]), len(result.rules)
    assert plain.count('class="truth"') == 0 and "Recovered vs planted" not in plain
    assert with_truth.count('class="truth"') == 2 * n_models * n_tabs
    assert with_truth.count("Recovered vs planted") == n_tabs


def test_report_command_writes_the_page_and_rejects_other_documents(
    result: RefitResult, tmp_path: Path
) -> None:
    """`handoffmon report` renders a refit JSON; a non-refit JSON exits 1 with a message."""
    from click.testing import CliRunner

    from handoffmon.cli import main

    src = tmp_path / "refit.json"
    src.write_text(result.to_json(), encoding="utf-8")
    out = tmp_path / "r.html"
    res = CliRunner().invoke(main, ["report", str(src), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert out.read_text(encoding="utf-8").startswith("<!doctype html>")
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "something-else"}', encoding="utf-8")
    res = CliRunner().invoke(main, ["report", str(bad), "--out", str(tmp_path / "x.html")])
    assert res.exit_code == 1 and "not a handoffmon.refit document" in res.output


def test_report_loads_in_headless_chromium_without_console_errors(
    result: RefitResult, truth: dict, tmp_path: Path
) -> None:
    """Scripts run (they add #report-ready) and the console shows no errors; a screenshot is saved."""
    binary = require_binary("chromium")
    page = tmp_path / "report.html"
    page.write_text(render_report(result, truth=truth), encoding="utf-8")
    dom = chromium(binary, tmp_path / "profile", "--dump-dom", page.as_uri())
    assert 'id="report-ready"' in dom.stdout
    assert console_errors(dom) == []
    shot = tmp_path / "report.png"
    chromium(binary, tmp_path / "profile2", f"--screenshot={shot}", page.as_uri())
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1400, 2000) and len(data) > 50_000  # a rendered page, not a blank one


def test_empty_and_two_model_refits_render_without_errors() -> None:
    """A refit of no counts renders a page with the pooled tab only; a 2-model fleet renders every tab."""
    from handoffmon.counts import Counts
    from handoffmon.sim.fleet import make_fleet

    empty = render_report(refit(Counts(), buckets=DepthBuckets(), now=0.0))
    assert empty.count('<section class="rule') == 1 and "all rules" in empty
    small = refit(simulate_counts(make_fleet(2), 30, seed=1), buckets=DepthBuckets(), now=0.0)
    html = render_report(small)
    assert html.count('<section class="rule') == len(small.rules)


def test_a_refit_of_no_model_says_so_and_a_one_model_heatmap_keeps_its_axis_title() -> None:
    """No model: a banner says there is nothing to chart, instead of empty axes and frames (the
    heatmap's axis title ran off its left edge). One model: the title is centred at least half
    its width (~145 px, as the chart's right side allows) from the left edge."""
    from handoffmon.counts import Counts
    from handoffmon.report.svg import heatmap

    empty = render_report(refit(Counts(), buckets=DepthBuckets(), now=0.0))
    assert "No model has a checked turn in this refit" in empty
    assert '<svg class="chart' not in empty
    one = heatmap(["gpt-4o"], ["gpt-4o"], {}, 0.1)
    title = re.search(r'<text x="([\d.]+)" y="16\.0" text-anchor="middle" class="axis-title">', one)
    assert title is not None and float(title.group(1)) >= 145


def test_sparse_depth_buckets_are_faded(result: RefitResult) -> None:
    """Buckets with fewer than 30 checked turns are drawn at reduced opacity, the others are not."""
    from handoffmon.report.svg import SPARSE_N

    fit = result.rules[ALL_RULES]
    html = render_report(result).split('id="rule-1"')[0]
    sparse = sum(1 for c in fit.curves.values() for n in c.n if 0 < n < SPARSE_N)
    assert sparse > 0 and html.count('<g opacity="0.35">') == sparse


def test_riskiest_paths_include_pairs_never_observed_and_empty_matrix_says_why(result: RefitResult) -> None:
    """The risk table lists the lowest fitted risks (observed or not); an empty refit explains itself."""
    from handoffmon.counts import Counts

    fit = result.rules[ALL_RULES]
    section = render_report(result).split('id="rule-0"')[1].split("</section>")[0]
    table = section.split("Riskiest handoff paths")[1].split("</table>")[0]
    worst = min((p for p in fit.pairs if p.risk == p.risk), key=lambda p: p.risk)
    assert f"{worst.prefix_model} → {worst.model}</td><td><b>{100 * worst.risk:+.1f}" in table
    assert "No handoff pair has reached" not in section
    empty = render_report(refit(Counts(), buckets=DepthBuckets(), now=0.0))
    assert "No model has a checked turn in this refit" in empty


def test_report_command_refuses_a_refit_of_no_counts(tmp_path: Path) -> None:
    """A refit with the pooled fit but no model in it is an empty result: exit 4, no page written."""
    from click.testing import CliRunner

    from handoffmon.cli import main
    from handoffmon.counts import Counts

    src = tmp_path / "refit.json"
    src.write_text(refit(Counts(), buckets=DepthBuckets(), now=0.0).to_json(), encoding="utf-8")
    out = tmp_path / "r.html"
    res = CliRunner().invoke(main, ["report", str(src), "--out", str(out)])
    assert res.exit_code == 4, res.output
    assert "holds no model" in res.output and not out.exists()
    one = refit(simulate_counts(make_fleet(2), 30, seed=1), buckets=DepthBuckets(), now=0.0)
    src.write_text(one.to_json(), encoding="utf-8")
    assert CliRunner().invoke(main, ["report", str(src), "--out", str(out)]).exit_code == 0 and out.exists()


def test_a_sparse_refit_says_not_estimable_instead_of_drawing_blanks() -> None:
    """8 models, 25 conversations: π/σ, Δ and chains cannot be estimated, and every chart says so.

    Before, the π/σ charts showed the planted diamonds beside empty rows, handed-off pairs were
    blank heatmap cells with no tooltip, and the Markov table and recovery chart were empty frames.
    """
    fleet = make_fleet(8, seed=3)
    result = refit(simulate_counts(fleet, 25, seed=1), buckets=DepthBuckets(), now=0.0)
    fit = result.rules[ALL_RULES]
    assert fit.models and not any(svg_finite(s.prefix_influence) for s in fit.models.values())
    section = render_report(result, truth=Truth.of(fleet).to_dict()).split('id="rule-0"')[1]
    section = section.split("</section>")[0]
    bars = section.split('class="pair-charts"')[1].split("</div>")[0]
    assert bars.count(">not estimable</text>") == 2 * len(fit.models)
    assert bars.count(": not estimable (n=") == 2 * len(fit.models)
    heat = section.split('class="chart heatmap"')[1].split("</svg>")[0]
    handed = [p for p in fit.pairs if p.n > 0 and not p.observed and not svg_finite(p.risk)]
    assert handed and heat.count('<g class="na">') == len(handed)
    p = handed[0]
    assert f"{p.prefix_model} → {p.model}: not estimable (n={p.n}, below min n {result.min_n})" in heat
    markov = section.split("Markov decay")[1].split("</div>")[0]
    assert not (fit.markov_same_author or fit.markov)
    assert f"No model has {result.markov_min_transitions} transitions" in markov
    assert "No pair has an estimated Δ yet" in section.split("Recovered vs planted")[1]


def _texts(svg_text: str) -> list[tuple[float, str, str]]:
    """(x, text-anchor, label) of every <text> in an SVG fragment."""
    return [
        (float(x), anchor, label)
        for x, anchor, label in re.findall(
            r'<text x="([\d.]+)" y="[\d.]+" text-anchor="(\w+)"[^>]*>([^<]*)</text>', svg_text
        )
    ]


def test_long_model_names_fit_the_handoff_bubbles_and_depth_labels_do_not_collide() -> None:
    """Row labels of the bubble chart start inside the chart; column labels too long for their
    column are turned 45° (parallel, a line apart) and stay inside the chart; 12 depth buckets'
    labels are turned instead of printed over each other (~7 px a char)."""
    from handoffmon.report.svg import Series, bubbles, depth_curves

    names = ["a-rather-long-deployment-name-1", "a-rather-long-deployment-name-2", "short"]
    chart = bubbles(names, names, {(names[0], names[1]): 10})
    width = float(re.search(r'viewBox="0 0 ([\d.]+) ', chart).group(1))  # type: ignore[union-attr]
    texts = _texts(chart)
    rows = [(x, label) for x, anchor, label in texts if anchor == "end"]
    assert rows and all(x - 7 * len(label) >= 0 for x, label in rows)
    turned = re.findall(
        r'<text x="([\d.]+)" y="([\d.]+)" text-anchor="start" class="tick" transform="rotate\(-45 [^"]+\)">'
        r"([^<]*)</text>",
        chart,
    )
    assert sorted(label for _, _, label in turned) == sorted(names)
    reach = [(float(x) + 0.71 * 7 * len(label), float(y) - 0.71 * 7 * len(label)) for x, y, label in turned]
    assert all(right <= width and top >= 0 for right, top in reach)
    cols = sorted(float(x) for x, _, _ in turned)
    assert min(b - a for a, b in itertools.pairwise(cols)) * 0.71 >= 14  # a line apart, across
    buckets = DepthBuckets().labels
    nan = float("nan")
    many = depth_curves(buckets, Series("m", "#000", *[[nan] * len(buckets)] * 4, [0] * len(buckets)))
    assert len(buckets) >= 12 and many.count('transform="rotate(-45') == len(buckets)
    few = depth_curves(("1", "2", "3+"), Series("m", "#000", *[[nan] * 3] * 4, [0] * 3))
    assert "rotate(-45" not in few


def test_effect_widths_are_in_percentage_points_and_mu_has_its_interval(result: RefitResult) -> None:
    """Δ, risk and μ are differences of adherence (pp): their ± must not read as a share ('%')."""
    from statistics import NormalDist

    fit = result.rules[ALL_RULES]
    z = NormalDist().inv_cdf(0.5 + result.confidence / 2)
    section = render_report(result).split('id="rule-0"')[1].split("</section>")[0]
    table = section.split("Riskiest handoff paths")[1].split("</table>")[0]
    worst = min((p for p in fit.pairs if p.risk == p.risk), key=lambda p: p.risk)
    assert f"± {100 * z * worst.risk_se:.1f} pp</span>" in table
    assert not re.search(r"± [\d.]+%", table)
    assert f"mean handoff effect μ (95% ± {100 * z * fit.mu_se:.1f} pp)" in section


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))


def test_charts_have_accessible_names_and_tabs_are_an_aria_tablist(result: RefitResult, truth: dict) -> None:
    """Every chart is an image with a name (not a nameless 'image'); tabs and panels are linked."""
    parser = _Elements()
    parser.feed(render_report(result, truth=truth))
    charts = [a for tag, a in parser.elements if tag == "svg" and (a.get("role") == "img")]
    assert len(charts) > 10 and all((a.get("aria-label") or "").strip() for a in charts)
    names = [a["aria-label"] for a in charts if "curve" in (a.get("class") or "")]
    assert "Adherence by conversation depth of atlas" in names
    tabs = [a for tag, a in parser.elements if tag == "button" and "tab" in (a.get("class") or "")]
    panels = {a["id"]: a for tag, a in parser.elements if tag == "section" and a.get("role") == "tabpanel"}
    assert len(tabs) == len(result.rules) == len(panels)
    assert all(t.get("role") == "tab" and t.get("aria-controls") in panels for t in tabs)
    assert [t.get("aria-selected") for t in tabs] == ["true", *["false"] * (len(tabs) - 1)]
    assert all(panels[t["aria-controls"]].get("aria-labelledby") == t.get("id") for t in tabs)


def test_a_one_model_deployment_says_there_is_nothing_to_hand_off() -> None:
    """One model: no 'wait for more traffic' (no amount of traffic makes a handoff), μ 'not
    estimable' rather than '– pp ± –', and the heatmap tall enough for its rotated axis title."""
    from handoffmon.counts import Counts
    from handoffmon.types import NO_PREFIX

    two = simulate_counts(make_fleet(2, seed=3), 300, seed=1)
    keep = {"sim-00", NO_PREFIX}
    one = Counts(
        checks={k: v for k, v in two.checks.items() if k.model == "sim-00" and k.prefix_model in keep},
        baseline_checks={k: v for k, v in two.baseline_checks.items() if k.model == "sim-00"},
        transitions={
            k: v for k, v in two.transitions.items() if k.model == "sim-00" and k.handoff == "false"
        },
    )
    result = refit(one, buckets=DepthBuckets(), now=0.0)
    assert list(result.rules[ALL_RULES].models) == ["sim-00"]
    section = render_report(result).split('id="rule-0"')[1].split("</section>")[0]
    assert "One model only" in section and "once more traffic has been recorded" not in section
    assert "not estimable</div>" in section and "± –" not in section
    heat = re.search(r'<svg class="chart heatmap" viewBox="0 0 \d+ (\d+)"', section)
    title = re.search(r'transform="rotate\(-90 12 (\d+)\)"', section)
    assert heat and title and int(title.group(1)) + 50 <= int(heat.group(1))  # ~100 px title, centred


def test_a_forty_model_refit_draws_the_thirty_busiest_and_says_so() -> None:
    """K = 40: the pair charts grow as K², so each tab draws the 30 models with most checked
    turns, names the cut, and the page stays under ~0.6 MB per fit (it was 0.75 MB)."""
    fleet = make_fleet(40, n_rules=1, seed=3)
    result = refit(simulate_counts(fleet, 1500, seed=1), buckets=DepthBuckets(), now=0.0)
    fit = result.rules[ALL_RULES]
    assert len(fit.models) == 40
    html = render_report(result)
    section = html.split('id="rule-0"')[1].split("</section>")[0]
    assert "Showing 30 of 40 models" in section
    heat = section.split('class="chart heatmap"')[1].split("</svg>")[0]
    busiest = sorted(fit.curves, key=lambda m: (-sum(fit.curves[m].n), m))
    rows = re.findall(r'text-anchor="end" class="tick">([^<]+)</text>', heat)
    assert sorted(rows) == sorted(busiest[:30]) and busiest[30] not in rows
    assert heat.count('class="diag"') == 30
    assert len(html) < 600_000 * len(result.rules)


def test_the_r2_headline_is_the_adjusted_one_and_says_how_many_pairs(result: RefitResult) -> None:
    """With few pairs the raw R² of μ + π + σ is near 1 whatever the data (2 models: exactly);
    the KPI shows the adjusted R² the refit CLI prints, and '–' when it cannot be estimated."""
    import dataclasses

    fit = result.rules[ALL_RULES]
    kpis = render_report(result).split('id="rule-0"')[1].split('<div class="grid two">')[0]
    assert (
        f'{fit.r2_adjusted:.2f}</div><div class="kpi-k">decomposition R² (adjusted, {fit.n_pairs} pairs)'
        in kpis
    )
    saturated = dataclasses.replace(fit, r2=0.99999, r2_adjusted=float("nan"), n_pairs=2)
    page = render_report(dataclasses.replace(result, rules={ALL_RULES: saturated}))
    assert "– (too few pairs)</div>" in page and ">1.00<" not in page


def test_the_riskiest_handoff_kpi_says_when_its_interval_includes_zero(result: RefitResult) -> None:
    """The lowest point estimate is often noise (0 of 6 significant under verdict routing): the KPI
    says so with its interval instead of presenting it as a finding; a significant one reads plain."""
    import dataclasses

    fit = result.rules[ALL_RULES]
    worst = min((p for p in fit.pairs if p.observed), key=lambda p: p.delta)
    for significant in (True, False):
        pairs = [dataclasses.replace(p, significant=significant) if p is worst else p for p in fit.pairs]
        one = dataclasses.replace(result, rules={ALL_RULES: dataclasses.replace(fit, pairs=pairs)})
        kpi = render_report(one).split("riskiest observed handoff")[1].split("</div>")[0]
        noted = f" (interval includes 0: {100 * worst.ci_low:+.0f} to {100 * worst.ci_high:+.0f} pp)"
        assert (kpi == noted) == (not significant) and (kpi == "") == significant


def test_planted_stationary_is_marked_inside_or_outside_not_only_coloured(
    result: RefitResult, truth: dict
) -> None:
    """Each planted stationary adherence carries ✓ (inside the chain's interval) or ✗ (outside)."""
    import copy

    rule = sorted(r for r in result.rules if r != ALL_RULES)[0]
    fit = result.rules[rule]
    model = next(m for m in sorted(fit.markov_same_author or fit.markov))
    mk = fit.markov_same_author.get(model) or fit.markov[model]
    moved = copy.deepcopy(truth)
    moved["models"][model]["stationary"][rule] = 0.01  # far outside any chain's interval
    page = render_report(result, truth=moved)
    idx = 1  # tabs: the pooled fit first, then the rules sorted, and `rule` is the first of those
    section = page.split(f'id="rule-{idx}"')[1].split("</section>")[0]
    row = section.split(f"<tr><td>{model}</td>")[1].split("</tr>")[0]
    assert row.endswith('<td class="miss">1.0% ✗</td>'), row
    inside = truth["models"][model]["stationary"][rule]
    row = render_report(result, truth=truth).split(f'id="rule-{idx}"')[1].split(f"<tr><td>{model}</td>")[1]
    ok = mk.stationary_ci[0] <= inside <= mk.stationary_ci[1]
    assert row.split("</tr>")[0].endswith(f"{100 * inside:.1f}% {'✓' if ok else '✗'}</td>")


def test_a_truth_from_another_fleet_is_refused_not_silently_ignored(
    result: RefitResult, tmp_path: Path
) -> None:
    """--truth whose models are none of the refit's would draw no marker and no recovery chart."""
    import json

    from click.testing import CliRunner

    from handoffmon.cli import main

    src, out, other = tmp_path / "refit.json", tmp_path / "r.html", tmp_path / "truth.json"
    src.write_text(result.to_json(), encoding="utf-8")
    other.write_text(json.dumps(Truth.of(make_fleet(3, seed=1)).to_dict()), encoding="utf-8")
    res = CliRunner().invoke(main, ["report", str(src), "--out", str(out), "--truth", str(other)])
    assert res.exit_code == 1 and "names none of the refit's" in res.output and not out.exists()
    good = tmp_path / "good.json"
    good.write_text(json.dumps(Truth.of(default_fleet()).to_dict()), encoding="utf-8")
    res = CliRunner().invoke(main, ["report", str(src), "--out", str(out), "--truth", str(good)])
    assert res.exit_code == 0, res.output
    assert out.read_text(encoding="utf-8").count('class="truth"') == 2 * 6 * len(result.rules)


def test_a_refit_with_many_rules_gets_tabs_for_the_24_busiest_and_names_the_rest(result: RefitResult) -> None:
    """refit.max_rules allows 100 rules, each tab a full set of charts: the page keeps the pooled tab
    and the 24 rules with most checks, and names the others (their fits stay in the JSON)."""
    import dataclasses

    base = result.rules[sorted(r for r in result.rules if r != ALL_RULES)[0]]
    quiet = dataclasses.replace(base, curves={})  # no checked turns drawn: the least busy
    rules = {ALL_RULES: result.rules[ALL_RULES]}
    rules |= {f"rule-{i:02d}": dataclasses.replace(base, rule=f"rule-{i:02d}") for i in range(24)}
    rules |= {f"a-quiet-{i}": dataclasses.replace(quiet, rule=f"a-quiet-{i}") for i in range(6)}
    html = render_report(dataclasses.replace(result, rules=rules))
    tabs = re.findall(r'<button class="tab[^"]*" data-target="rule-\d+"[^>]*>([^<]+)</button>', html)
    assert tabs == ["all rules", *(f"rule-{i:02d}" for i in range(24))]
    assert html.count('<section class="rule') == 25
    note = html.split("6 rules without a tab")[1].split("</div>")[0]
    assert all(f"a-quiet-{i}" in note for i in range(6))
    assert "without a tab" not in render_report(result)


@pytest.mark.parametrize("created_at", [1e20, -1e20, None])
def test_a_refit_time_no_clock_can_show_is_refused_on_read_and_unknown_on_the_page(
    result: RefitResult, tmp_path: Path, created_at: float | None
) -> None:
    """A refit document whose created_at is 1e20, -1e20 or null (NaN) made `handoffmon report`
    die in time.gmtime with a traceback. Reading it now fails naming the key (exit 1, no
    traceback); a result built in memory with such a time still renders, as 'time unknown'."""
    import dataclasses
    import json

    from click.testing import CliRunner

    from handoffmon.cli import main

    src = tmp_path / "refit.json"
    src.write_text(json.dumps({**result.to_dict(), "created_at": created_at}), encoding="utf-8")
    out = tmp_path / "r.html"
    res = CliRunner().invoke(main, ["report", str(src), "--out", str(out)])
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert "created_at: expected a UNIX time" in res.stderr and not out.exists()
    at = float("nan") if created_at is None else created_at
    assert "refit time unknown" in render_report(dataclasses.replace(result, created_at=at))


def test_a_negative_pair_count_from_a_damaged_document_still_renders() -> None:
    """A refit JSON whose pair has n = -1 loads; the bubble chart died in math.sqrt (ValueError:
    math domain error) and with it the whole report. Found by mutating each number of a refit."""
    from handoffmon.report.svg import bubbles

    chart = bubbles(["a", "b"], ["a", "b"], {("a", "b"): -1, ("b", "a"): 4})
    assert chart.count('class="bubble"') == 2 and "n = -1" in chart


def test_a_truth_with_a_key_given_twice_is_refused_naming_file_and_key(
    result: RefitResult, tmp_path: Path
) -> None:
    """A hand-edited --truth with a model pasted twice was read as the last copy (json.loads keeps
    it) and drawn with exit 0; it is refused as a refit JSON with a repeated key is (exit 1, the
    file and the key named, nothing written). A truth that is not JSON names its line and column."""
    import json

    from click.testing import CliRunner

    from handoffmon.cli import main

    src, out, truth = tmp_path / "refit.json", tmp_path / "r.html", tmp_path / "truth.json"
    src.write_text(result.to_json(), encoding="utf-8")
    doc = Truth.of(default_fleet()).to_dict()
    model = sorted(doc["models"])[0]
    text = json.dumps(doc)
    pasted = json.dumps({model: doc["models"][model]})[1:-1]
    truth.write_text(text.replace('"models": {', '"models": {' + pasted + ", ", 1), encoding="utf-8")
    assert json.loads(truth.read_text(encoding="utf-8")) == doc  # what the reader used to accept
    res = CliRunner().invoke(main, ["report", str(src), "--out", str(out), "--truth", str(truth)])
    assert res.exit_code == 1, res.output
    assert res.output.startswith(f"error: {truth}: ") and f"{model!r} given twice" in res.output, res.output
    assert not out.exists()
    truth.write_text('{"models": {}\n,}', encoding="utf-8")
    res = CliRunner().invoke(main, ["report", str(src), "--out", str(out), "--truth", str(truth)])
    assert res.exit_code == 1 and res.output.startswith(f"error: {truth}: line 2, column 2: "), res.output
    truth.write_text("[" * 200_000 + "]" * 200_000, encoding="utf-8")  # was a RecursionError traceback
    res = CliRunner().invoke(main, ["report", str(src), "--out", str(out), "--truth", str(truth)])
    assert (
        res.exit_code == 1
        and res.output == f"error: {truth}: nested too deeply to read (thousands of levels)\n"
    )


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (
            lambda d: d["models"].update(atlas="garbage"),
            "models.atlas: expected an object, got a string 'garbage'",
        ),
        (
            lambda d: d["models"]["atlas"].update(prefix_influence="high"),
            "models.atlas.prefix_influence: expected a number, got a string 'high'",
        ),
        (
            lambda d: d["models"]["atlas"]["stationary"].update(no_commas=7),
            "models.atlas.stationary.no_commas: expected a number in [0, 1], got 7",
        ),
        (
            lambda d: d["models"]["atlas"].update(p_tf=[0.1]),
            "models.atlas.p_tf: expected an object, got a list",
        ),
        (lambda d: d.update(mu="0"), "mu: expected a number, got a string '0'"),
        (
            lambda d: d.update(switch_costs=[{"rule": "r", "prefix_model": "atlas", "model": "ember"}]),
            "switch_costs[0].planted: missing",
        ),
    ],
)
def test_a_malformed_truth_is_refused_naming_the_key(
    result: RefitResult, tmp_path: Path, edit: Any, says: str
) -> None:
    """A hand-edited --truth whose model entry is not an object was a Python traceback
    (AttributeError: 'str' object has no attribute 'get'); a planted value of another type was
    drawn as no marker, with exit 0. Each is refused (exit 1) naming the file and the key path."""
    import json

    from click.testing import CliRunner

    from handoffmon.cli import main

    src, out, truth = tmp_path / "refit.json", tmp_path / "r.html", tmp_path / "truth.json"
    src.write_text(result.to_json(), encoding="utf-8")
    doc = Truth.of(default_fleet()).to_dict()
    edit(doc)
    truth.write_text(json.dumps(doc), encoding="utf-8")
    res = CliRunner().invoke(main, ["report", str(src), "--out", str(out), "--truth", str(truth)])
    assert res.exit_code == 1 and res.output.startswith(f"error: {truth}: {says}"), res.output
    assert not out.exists()
