"""The eval page's chart titles fit their chart however long the rule or author name (audit 2026-12-07).

An author of 128 characters (production's label length: a Bedrock ARN) made the chart title
``rule · author`` run past the chart's right edge, cut off mid-name with nothing to show the
rest (the headless-Chromium probe reported it outside the SVG). It is shortened with a middle
ellipsis now, and the whole ``rule · author`` is the title's tooltip.
"""

from __future__ import annotations

import re
import shutil
from html import unescape
from pathlib import Path

import pytest

from handoffmon.evals.html import eval_report
from handoffmon.evals.results import build_result
from handoffmon.evals.script import script_from_dict
from handoffmon.evals.store import Row

AUTHOR = "bedrock-arn-aws-bedrock-eu-west-1-123456789012-application-inference-profile-" + "x" * 51
RULE = "reply_in_spanish_even_when_the_user_writes_in_english"
SCRIPT = {
    "id": "names",
    "runs": 2,
    "rules": [{"name": RULE, "check": "no_commas"}, {"name": "ok", "check": "no_commas"}],
    "turns": [{"user": "a", "checkpoint": True}, {"user": "b", "checkpoint": True}],
}


def _page(author: str) -> str:
    script = script_from_dict(SCRIPT)
    rows = [
        Row("names", "chat", run, turn, rule, "pass", "", None, True, False, author, 10)
        for run in range(2)
        for turn in (1, 2)
        for rule in (RULE, "ok")
    ]
    return eval_report(build_result(rows, [script], "n.sqlite"))


def _titles(page: str) -> list[str]:
    return [unescape(t) for t in re.findall(r'class="chart-title">([^<]*)<', page)]


def test_a_long_rule_and_author_title_is_shortened_with_the_whole_name_as_tooltip() -> None:
    page = _page(AUTHOR)
    titles = _titles(page)
    assert len(titles) == 2
    for t in titles:
        assert len(t) <= 45 and "…" in t and " · " in t, t
        assert t.startswith(("reply_i", "ok · ")) and t.endswith("xxx"), t
    assert f"<title>{RULE} · {AUTHOR}</title>" in page
    assert f"<title>ok · {AUTHOR}</title>" in page


def test_a_short_name_is_drawn_whole_and_the_long_one_beside_it_gives_way() -> None:
    """``ok · atlas`` fits as is; the 53-character rule beside ``atlas`` is shortened, not atlas."""
    short, long = sorted(_titles(_page("atlas")))
    assert short == "ok · atlas"
    assert long.endswith("_in_english · atlas") and long.startswith("reply_in_") and "…" in long
    assert len(long) <= 45


@pytest.mark.slow
def test_in_chromium_no_title_runs_outside_its_chart(tmp_path: Path) -> None:
    from tests.evals.layout import probe

    binary = shutil.which("chromium")
    if binary is None:
        pytest.skip("chromium not installed")
    page = tmp_path / "eval.html"
    page.write_text(_page(AUTHOR), encoding="utf-8")
    svgs = probe(binary, page, tmp_path)["svgs"]
    assert len(svgs) == 2 and all(not s["outside"] and not s["clash"] for s in svgs), svgs
