"""Session-length percentiles from turns per depth bucket survive an empty middle bucket (sparse counts)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from handoffmon.cli import main
from handoffmon.depth import DepthBuckets
from handoffmon.evals.shapes import PERCENTILES, percentiles_from_histogram

LENGTHS = {length: 10 for length in range(1, 17)}
"""10 conversations of every length 1 … 16."""
BUCKETS = DepthBuckets()


def _export(tmp_path: Path, name: str, skip: set[str]) -> dict[str, Any]:
    """shapes export of a cells CSV of those conversations, without the rows of the ``skip`` buckets."""
    turns: dict[str, int] = {}
    for length, conversations in LENGTHS.items():
        for depth in range(1, length + 1):
            bucket = BUCKETS.bucket(depth)
            turns[bucket] = turns.get(bucket, 0) + conversations
    csv = tmp_path / f"{name}.csv"
    csv.write_text(
        "rule,model,prefix_model,depth_bucket,n,passes\n"
        + "".join(f"no_commas,atlas,none,{b},{n},{n // 2}\n" for b, n in turns.items() if b not in skip),
        encoding="utf-8",
    )
    res = CliRunner().invoke(main, ["shapes", "export", "--source", str(csv), "--out", str(tmp_path / name)])
    assert res.exit_code == 0, res.output
    return dict(json.loads((tmp_path / name).read_text())["session_lengths"])


def test_an_empty_middle_bucket_does_not_collapse_the_percentiles(tmp_path: Path) -> None:
    """Bucket 2 missing from the CSV: the percentiles are those of the full CSV, near the exact ones."""
    dense = _export(tmp_path, "dense.json", set())
    sparse = _export(tmp_path, "sparse.json", {"2"})
    exact = percentiles_from_histogram(LENGTHS)
    assert sparse["max"] == dense["max"] == exact["max"] == 16
    keys = [f"p{q}" for q in PERCENTILES]
    assert [sparse[k] for k in keys] == [dense[k] for k in keys], (sparse, dense)
    assert all(sparse[a] <= sparse[b] for a, b in itertools.pairwise(keys)) and sparse["p99"] <= 16
    for k in keys:  # within one depth (a bucket early before the survival was interpolated in buckets)
        assert abs(sparse[k] - exact[k]) <= 1, (k, sparse[k], exact[k])
