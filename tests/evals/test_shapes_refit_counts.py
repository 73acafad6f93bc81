"""shapes export from a refit.json: turns counted once per turn (not once per rule), --match refused."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from click.testing import CliRunner

from handoffmon.cli import main
from handoffmon.counts import CheckKey, Counts, TurnKey
from handoffmon.depth import DepthBuckets
from handoffmon.refit import refit
from handoffmon.types import NO_PREFIX

BUCKETS = DepthBuckets()
RULES = ("a", "b", "c", "d")


def _refit(
    tmp_path: Path, conversations: int = 180, length: int = 6
) -> tuple[Path, Counter[tuple[str, str]]]:
    """Each conversation starts on m1 and hands over to m2 at depth 4; every turn checked by 4 rules."""
    checks: Counter[CheckKey] = Counter()
    turns: Counter[TurnKey] = Counter()
    pairs: Counter[tuple[str, str]] = Counter()
    for i in range(conversations):
        prefix = NO_PREFIX
        for depth in range(1, length + 1):
            author = "m1" if depth < 4 else "m2"
            bucket = BUCKETS.bucket(depth)
            handoff = "false" if prefix in (NO_PREFIX, author) else "true"
            turns[TurnKey(author, prefix, bucket, handoff)] += 1
            if handoff == "true":
                pairs[(prefix, author)] += 1
            for k, rule in enumerate(RULES):
                verdict = "pass" if (i + depth + k) % 3 else "fail"
                checks[CheckKey(rule, author, prefix, bucket, verdict)] += 1
            prefix = author
    path = tmp_path / "refit.json"
    path.write_text(refit(Counts(checks=dict(checks), turns=dict(turns)), buckets=BUCKETS).to_json())
    return path, pairs


def test_shapes_from_a_refit_count_conversations_and_pair_turns_once(tmp_path: Path) -> None:
    """180 conversations of 6 turns, 4 rules: conversations 180 (not 720), pair turns 180 (not 720)."""
    path, pairs = _refit(tmp_path)
    out = tmp_path / "shapes.json"
    res = CliRunner().invoke(main, ["shapes", "export", "--source", str(path), "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["session_lengths"]["conversations"] == 180
    assert {(p["prefix_model"], p["model"]): p["turns"] for p in doc["handoff_pairs"]} == dict(pairs)
    assert {r["rule"] for r in doc["rules"]} == set(RULES)


def test_match_with_a_refit_json_source_is_refused(tmp_path: Path) -> None:
    """--match only applies to Prometheus: a refit.json source with --match exits 1 and writes nothing."""
    path, _ = _refit(tmp_path, conversations=20)
    out = tmp_path / "shapes.json"
    args = ["shapes", "export", "--source", str(path), "--match", "garbage", "--out", str(out)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 1 and "--match only applies to a Prometheus source" in res.output, res.output
    assert str(path) in res.output and not out.exists()
