"""``handoffmon check`` holds one reply's verdicts at a time, not the whole file's (audit 2026-12-07).

Every line's results were kept in a list until the end (about 0.4 KB a reply: 3.8 GB for ten
million), and the garbage collector's passes over that growing list ran inside the checks'
CPU budget: 4 of 200,000 identical replies came out ``error`` / ``over_budget``. Verdicts now
stream to ``--output`` (a temp file renamed when complete) and only the tally stays.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

from click.testing import CliRunner

from handoffmon.cli import main

RULES = """rules:
  - {name: no_commas, check: no_commas}
  - {name: short, check: length, params: {unit: words, max: 60}}
"""


def _peak_kib(tmp_path: Path, lines: int, *args: str) -> tuple[int, str]:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES, encoding="utf-8")
    replies = tmp_path / f"r{lines}.jsonl"
    with replies.open("w", encoding="utf-8") as fh:
        for i in range(lines):
            fh.write(json.dumps({"reply": "hola amigo todo bien", "depth": i % 20 + 1}) + "\n")
    runner = CliRunner()
    runner.invoke(main, ["check", "--rules", str(rules), "--input", str(replies)])  # warm imports
    tracemalloc.start()
    try:
        res = runner.invoke(main, ["check", "--rules", str(rules), "--input", str(replies), *args])
        peak = tracemalloc.get_traced_memory()[1] // 1024
    finally:
        tracemalloc.stop()
    assert res.exit_code == 0, res.output
    return peak, res.output


def test_memory_does_not_grow_with_the_number_of_replies(tmp_path: Path) -> None:
    """2,000 replies peak within 200 KiB of 200 (kept per line: ~0.3 KiB a reply, ~570 KiB more)."""
    small, _ = _peak_kib(tmp_path, 200)
    large, out = _peak_kib(tmp_path, 2000)
    assert "2000 replies" in out
    assert large - small < 200, (small, large)


def test_verdicts_stream_to_output_with_the_same_lines(tmp_path: Path) -> None:
    """--output still holds one line per (reply, rule), in input order, and no temp file stays."""
    out = tmp_path / "v.jsonl"
    _, summary = _peak_kib(tmp_path, 50, "--output", str(out))
    rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert [(r["line"], r["rule"]) for r in rows[:4]] == [
        (1, "no_commas"),
        (1, "short"),
        (2, "no_commas"),
        (2, "short"),
    ]
    assert len(rows) == 100 and {r["verdict"] for r in rows} == {"pass"}
    assert "50 replies" in summary
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r50.jsonl", "rules.yaml", "v.jsonl"]


def test_no_rule_in_scope_writes_no_output(tmp_path: Path) -> None:
    """Exit 4 and no --output file when no rule applied (the streamed temp file is removed)."""
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  - {name: deep, check: no_commas, scope: {min_depth: 50}}\n", encoding="utf-8")
    replies = tmp_path / "r.jsonl"
    replies.write_text(json.dumps({"reply": "a, b", "depth": 1}) + "\n", encoding="utf-8")
    out = tmp_path / "v.jsonl"
    res = CliRunner().invoke(
        main, ["check", "--rules", str(rules), "--input", str(replies), "--output", str(out)]
    )
    assert res.exit_code == 4, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl", "rules.yaml"]
