"""The whole production → eval loop on the simulator, through the CLI a user runs, and its pages in Chromium.

Production: simulated conversations through a real ``litellm.Router`` (the simulator's
custom provider, injected 429s/timeouts and fallbacks) wrapped by ``handoffmon.wrap``,
with ``no_commas`` planted to decay 8× faster than in the fleet the eval talks to
(``--router sim:3``). Then ``shapes export`` (default source), ``eval run``,
``eval switch-matrix`` and ``eval compare --model <author>``.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_binary
from tests.evals.layout import probe, screenshot
from tests.evals.loop import FAST_RULE, cli, run_loop


def _loop(tmp_path_factory: pytest.TempPathFactory, **sizes: int) -> Iterator[dict[str, Any]]:
    workdir = tmp_path_factory.mktemp("loop")
    here = Path.cwd()
    os.chdir(workdir)  # shapes export's default source is ./handoffmon.db, where the monitor wrote
    try:
        yield {"dir": workdir, **run_loop(workdir, **sizes)}
    finally:
        os.chdir(here)


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    yield from _loop(tmp_path_factory, conversations=40, runs=20, matrix_runs=20)


@pytest.mark.slow
def test_compare_joins_on_the_author_and_flags_only_the_planted_rule(loop: dict[str, Any]) -> None:
    """eval compare --model sim-00 --out -: stdout is the JSON alone, cells compared, no_commas flagged."""
    res, c = loop["compare"], loop["comparison"]
    assert loop["eval_run"].exit_code == 0, loop["eval_run"].output
    assert res.exit_code == 3, res.stderr  # ExitCode.FLAGGED
    assert c is not None and json.loads(res.stdout) == c  # nothing but the JSON on stdout
    assert "TOO CLEAN no_commas · sim-00" in res.stderr and "joined on the author" in res.stderr
    assert c["joined_on"] == "author" and c["model"] == "sim-00"
    assert len(c["rules"]) >= 16 and {r["model"] for r in c["rules"]} == {"sim-00"}
    flagged = {(r["rule"], r["depth"]) for r in c["rules"] if r["flagged"]}
    assert {rule for rule, _ in flagged} == {FAST_RULE}
    assert {(FAST_RULE, 9), (FAST_RULE, 12)} <= flagged and (FAST_RULE, 1) not in flagged


def test_eval_rows_record_the_requested_group_and_the_author(loop: dict[str, Any]) -> None:
    """eval run --model group-00: curves say model group-00, author sim-00 (and fallback authors)."""
    doc = json.loads((loop["dir"] / "eval.json").read_text())
    assert doc["version"] == 2 and set(doc["authors"]) == {"group-00"}
    answered = doc["authors"]["group-00"]
    assert max(answered, key=answered.get) == "sim-00" and sum(answered.values()) == 20 * 12
    assert {c["model"] for c in doc["curves"]} == {"group-00"}
    assert {c["author"] for c in doc["curves"]} <= {"sim-00", "sim-01", "sim-02"}


def test_no_pair_the_matrix_measured_is_reported_missing(loop: dict[str, Any]) -> None:
    """Matrix cells are named by author; production pairs it measured are not 'missing', the rest are."""
    assert loop["matrix"].exit_code == 0, loop["matrix"].output
    matrix = json.loads((loop["dir"] / "matrix.json").read_text())
    shapes = json.loads((loop["dir"] / "shapes.json").read_text())
    assert matrix["authors"] == {"group-00": "sim-00", "group-01": "sim-01"}
    measured = {(p["prefix_model"], p["model"]) for p in matrix["pairs"] if p["observed"]}
    production = {(p["prefix_model"], p["model"]) for p in shapes["handoff_pairs"]}
    assert measured == {("sim-00", "sim-01"), ("sim-01", "sim-00")} and measured <= production
    missing = {(p["prefix_model"], p["model"]) for p in loop["comparison"]["missing_pairs"]}
    assert not missing & measured
    assert missing == {p for p in production - measured if "sim-00" in p}  # --model filters pairs too
    for p in matrix["pairs"]:
        assert {"p_value", "p_adjusted", "significant"} <= p.keys()


def test_model_with_no_data_or_an_empty_source_exits_non_zero(loop: dict[str, Any], tmp_path: Path) -> None:
    """Unknown model, a requested group instead of its author, an empty store: exit 4 with a message."""
    d = loop["dir"]
    base = ["eval", "compare", "--shapes", str(d / "shapes.json"), str(d / "eval.json")]
    nosuch = cli(*base, "--model", "nosuch")
    assert nosuch.exit_code == 4 and "unknown model 'nosuch'" in nosuch.stderr and not nosuch.stdout
    group = cli(*base, "--model", "group-00")
    assert group.exit_code == 4 and "answered by sim-00" in group.stderr
    empty = tmp_path / "empty.db"
    from handoffmon.pipeline.aggregates import Aggregates

    Aggregates(str(empty)).close()
    res = cli("shapes", "export", "--source", f"sqlite://{empty}", "--out", str(tmp_path / "s.json"))
    assert res.exit_code == 4 and "no checked turns" in res.stderr and not (tmp_path / "s.json").exists()
    res = cli("refit", "--source", f"sqlite://{empty}", "--out", str(tmp_path / "r.json"))
    assert res.exit_code == 4 and not (tmp_path / "r.json").exists()


@pytest.mark.slow
def test_eval_page_in_chromium_overlays_production_on_a_depth_axis(loop: dict[str, Any]) -> None:
    """Every chart: x is the depth (equal spacing per turn), production bands, the flags only on no_commas."""
    binary = require_binary("chromium")
    d = loop["dir"]
    layout = probe(binary, d / "eval.html", d)
    charts = [s for s in layout["svgs"] if "overlay" in s["cls"]]
    assert {(s["rule"], s["model"]) for s in charts} >= {(FAST_RULE, "sim-00"), ("answer_tag", "sim-00")}
    assert layout["emptyCards"] == []
    for s in charts:
        assert s["xAxis"] == "depth" and s["clash"] == [] and s["outside"] == [], s
        assert s["bands"] >= 1  # production overlaid for every author production has
        pts = sorted((p["depth"], p["x"]) for p in s["points"] if p["x"] is not None)
        if len(pts) >= 3:  # a linear depth axis: pixels per turn are the same between any checkpoints
            steps = {round((x2 - x1) / (d2 - d1), 1) for (d1, x1), (d2, x2) in itertools.pairwise(pts)}
            assert max(steps) - min(steps) < 0.3, (s["rule"], s["model"], pts)
        flagged = [p for p in s["points"] if p["flagged"]]
        assert bool(flagged) == ((s["rule"], s["model"]) == (FAST_RULE, "sim-00"))
        assert (s["flaggedBands"] > 0) == bool(flagged)
    png = screenshot(binary, d / "eval.html", d / "eval.png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 50_000


@pytest.mark.slow
def test_matrix_page_in_chromium_shows_only_what_a_matrix_has(loop: dict[str, Any]) -> None:
    """No depth or Markov cards, no empty card, no overlapping or clipped label (long names included)."""
    binary = require_binary("chromium")
    d = loop["dir"]
    layout = probe(binary, d / "matrix.html", d)
    assert layout["cards"] == ["Handoff effect Δ(A→B)", "Who hurts, who suffers", "Pairs", "Cell means"]
    assert layout["emptyCards"] == []
    assert all(s["clash"] == [] and s["outside"] == [] for s in layout["svgs"]), layout["svgs"]
    # long author names: column headers widen instead of running into each other
    from handoffmon.evals.matrix_page import matrix_report
    from handoffmon.refit.result import SwitchMatrixResult

    doc = json.loads((d / "matrix.json").read_text())
    long = json.loads(
        json.dumps(doc).replace("sim-00", "experimental-large-2025").replace("sim-01", "general-purpose-v2")
    )
    page = d / "matrix-long.html"
    page.write_text(matrix_report(SwitchMatrixResult.from_dict(long)), encoding="utf-8")
    layout = probe(binary, page, d)
    assert all(s["clash"] == [] and s["outside"] == [] for s in layout["svgs"]), layout["svgs"]


@pytest.mark.slow
def test_the_loop_at_demo_scale(tmp_path_factory: pytest.TempPathFactory) -> None:
    """300 production conversations, 60 eval runs, 40 matrix episodes: the same findings, tighter."""
    for big in _loop(tmp_path_factory, conversations=300, runs=60, matrix_runs=40):
        c = big["comparison"]
        assert big["compare"].exit_code == 3 and c is not None
        assert {r["rule"] for r in c["rules"] if r["flagged"]} == {FAST_RULE}
        assert all(r["flagged"] for r in c["rules"] if r["rule"] == FAST_RULE and r["depth"] >= 2)
        measured = {
            (p["prefix_model"], p["model"])
            for p in json.loads((big["dir"] / "matrix.json").read_text())["pairs"]
        }
        assert not {(p["prefix_model"], p["model"]) for p in c["missing_pairs"]} & measured
