"""--source specs: dispatch to SQLite / CSV / Prometheus, window rules, unknown specs."""

from __future__ import annotations

from pathlib import Path

import pytest

from handoffmon.counts import CheckKey
from handoffmon.errors import StoreError
from handoffmon.pipeline.aggregates import Aggregates
from handoffmon.sources import SourceError
from handoffmon.sources.local import from_snapshot
from handoffmon.sources.spec import load_source
from tests.sources.replica import synthetic_turns


def test_sqlite_spec_reads_persisted_aggregates(tmp_path: Path) -> None:
    """sqlite://PATH loads what a monitor's Aggregates flushed to that file."""
    db = tmp_path / "agg.sqlite"
    agg = Aggregates(str(db))
    for turn in synthetic_turns(3, 50):
        agg.add_turn(turn)
    agg.flush()
    want = agg.snapshot()
    agg.close()
    loaded = load_source(f"sqlite://{db}")
    assert loaded.counts.checks == want.checks and loaded.label == f"sqlite://{db}"


def test_csv_spec_with_transitions_merges_both(tmp_path: Path) -> None:
    """FILE.csv plus --transitions gives checks and transitions in one Counts."""
    cells = tmp_path / "cells.csv"
    cells.write_text("rule,prefix_model,model,depth_bucket,n,passes\nr,a,b,2,3,1\n")
    trans = tmp_path / "t.csv"
    trans.write_text("rule,model,handoff,from_verdict,to_verdict,count\nr,b,true,pass,fail,2\n")
    loaded = load_source(str(cells), transitions=str(trans))
    assert loaded.counts.checks[CheckKey("r", "b", "a", "2", "fail")] == 2
    assert sum(loaded.counts.transitions.values()) == 2


def test_bad_specs_fail_clearly(tmp_path: Path) -> None:
    """Unknown schemes, a window without Prometheus and a missing SQLite file are errors."""
    with pytest.raises(SourceError, match="unknown source"):
        load_source("redis://x")
    with pytest.raises(SourceError, match="--window only applies"):
        load_source("x.csv", window="1h")
    with pytest.raises(StoreError, match="no such SQLite file"):
        load_source(f"sqlite://{tmp_path / 'missing.db'}")


def test_local_source_checks_the_snapshot_type() -> None:
    """from_snapshot passes Counts through and turns failures into SourceError."""
    agg = Aggregates()
    assert from_snapshot(agg.snapshot).checks == {}
    with pytest.raises(SourceError, match="not Counts"):
        from_snapshot(lambda: {})  # type: ignore[arg-type,return-value]


def test_infer_buckets_reproduces_labels_even_without_depth_one() -> None:
    """Labels 2 and 3-4 (no depth-1 data) → edges 1, 2, 3, 5: every label maps to itself."""
    from handoffmon.counts import Counts
    from handoffmon.sources.spec import infer_buckets

    checks = {CheckKey("r", "b", "a", lab, "pass"): 1 for lab in ("2", "3-4", "33+")}
    buckets = infer_buckets(Counts(checks=checks))
    assert buckets.edges == (1, 2, 3, 5, 33)
    assert {"2", "3-4", "33+"} <= set(buckets.labels)
    from handoffmon.depth import DepthBuckets

    assert infer_buckets(Counts()).labels == DepthBuckets().labels


def test_infer_buckets_knows_the_buckets_of_turns_without_checks() -> None:
    """Turns in bucket 2 beside checks in 3-4 only: inferred from the checks the buckets were
    1-2, 3-4, 5+ and the turn at depth 2 fell out of the session lengths; now 2 is a bucket."""
    from handoffmon.counts import CELL_TOTAL, CellStatKey, Counts, TurnKey
    from handoffmon.sources.spec import infer_buckets

    checks = {CheckKey("r", "b", "a", "3-4", "pass"): 3}
    turns = {TurnKey("b", "a", "3-4", "true"): 6, TurnKey("b", "b", "2", "false"): 4}
    buckets = infer_buckets(Counts(checks=checks, turns=turns))
    assert buckets.labels == ("1", "2", "3-4", "5+")
    baseline = {CheckKey("r", "b", "b", "9-16", "pass"): 1}
    stats = {
        CellStatKey("r", "b", "a", "17-32", "depth"): 20,
        CellStatKey("all", "b", "a", CELL_TOTAL, "y2"): 9,
    }
    assert infer_buckets(Counts(checks=checks, baseline_checks=baseline, cell_stats=stats)).labels == (
        "1-2",
        "3-4",
        "5-8",
        "9-16",
        "17-32",
        "33+",
    )


def test_session_lengths_of_the_fake_prometheus_count_every_turn() -> None:
    """The fake Prometheus counts 10 turns in 3-4 and 1 in bucket 2 (checks only in 3-4): every
    bucket the data names is known, so no turn is left out of the session lengths."""
    from handoffmon.evals.shapes import shapes_from_counts
    from handoffmon.sources.spec import infer_buckets
    from tests.sources.fakeprom import fake_prometheus

    with fake_prometheus() as (url, _):
        counts = load_source(url).counts
    named = {k.depth_bucket for k in counts.turns} | {k.depth_bucket for k in counts.checks}
    assert named == {"2", "3-4"}
    labels = set(infer_buckets(counts).labels)
    assert named <= labels
    assert sum(v for k, v in counts.turns.items() if k.depth_bucket in labels) == 11
    shapes = shapes_from_counts(counts, source=url)
    assert {"2", "3-4"} <= set(shapes.buckets)
