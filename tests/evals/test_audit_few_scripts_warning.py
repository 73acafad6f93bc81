"""The few-scripts warning of ``eval switch-matrix`` quotes the measurements the guide publishes
(audit 2026-12-07): it said 78% coverage with 2 scripts and 87% with 4, raw p < 0.05 for 18% and
10% of null pairs, where docs/guides/eval-harness.md's table (the current intervals) has 87%,
92%, 6.5% and 3.7%."""

from __future__ import annotations

import re
from pathlib import Path

from handoffmon.cli.eval_cmd import FEW_SCRIPTS, few_scripts_warning

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "eval-harness.md"


def _row(label: str) -> dict[int, str]:
    lines = GUIDE.read_text(encoding="utf-8").splitlines()
    head = next(line for line in lines if line.strip().startswith("| scripts |"))
    row = next(line for line in lines if line.strip().startswith(f"| {label} |"))
    cols = [c.strip() for c in head.strip().strip("|").split("|")][1:]
    vals = [c.strip() for c in row.strip().strip("|").split("|")][1:]
    return dict(zip((int(c) for c in cols), vals, strict=True))


def test_the_warning_quotes_the_guides_table() -> None:
    coverage, raw = _row("coverage of the 95% interval"), _row("raw p < 0.05")
    text = few_scripts_warning(2)
    pattern = (
        r"measured: (\S+) coverage .* with 2 scripts, (\S+) with 4; raw p < 0\.05 for (\S+) and (\S+) of"
    )
    quoted = re.search(pattern, text)
    assert quoted, text
    assert quoted.groups() == (coverage[2], coverage[4], raw[2], raw[4])
    assert "2 scripts" in text and f"fewer than {FEW_SCRIPTS}" in text
