"""Cells: Counts → dense arrays, and the Wilson interval."""

from __future__ import annotations

import numpy as np
import pytest

from handoffmon.counts import CheckKey, Counts, TransitionKey
from handoffmon.depth import DepthBuckets
from handoffmon.refit.cells import build_cells, wilson, z_value


def test_wilson_matches_textbook_values() -> None:
    """8/10 at 95% is (0.4902, 0.9433) (Newcombe 1998, method 3); 0/n is finite and starts at 0."""
    lo, hi = wilson(np.array([8, 0]), np.array([10, 20]), z_value(0.95))
    assert lo[0] == pytest.approx(0.4902, abs=1e-4)
    assert hi[0] == pytest.approx(0.9433, abs=1e-4)
    assert lo[1] == 0.0
    assert hi[1] == pytest.approx(0.1611, abs=1e-4)


def test_wilson_is_nan_for_empty_cells() -> None:
    """No checked turns → no interval rather than a fake [0, 1]."""
    lo, hi = wilson(np.array([0]), np.array([0]), 1.96)
    assert np.isnan(lo[0]) and np.isnan(hi[0])


def test_build_cells_counts_only_pass_and_fail() -> None:
    """not_applicable and error verdicts never enter adherence."""
    counts = Counts(
        checks={
            CheckKey("r", "b", "a", "3-4", "pass"): 5,
            CheckKey("r", "b", "a", "3-4", "fail"): 2,
            CheckKey("r", "b", "a", "3-4", "not_applicable"): 40,
            CheckKey("r", "b", "a", "3-4", "error"): 9,
            CheckKey("r", "b", "none", "1", "pass"): 1,
        }
    )
    cells = build_cells(counts, DepthBuckets())
    assert cells.models == ("a", "b")
    assert cells.prefixes == ("a", "b", "none", "unknown")
    assert cells.checks.passes.sum() == 6 and cells.checks.fails.sum() == 2
    arr = cells.rule_arrays(0)
    assert arr.passes[0, 1, 2] == 5 and arr.fails[0, 1, 2] == 2
    assert arr.passes[cells.none_index, 1, 0] == 1


def test_build_cells_rebuckets_finer_labels_by_lower_bound() -> None:
    """Counts recorded with finer edges (label "4") land in the configured "3-4" bucket."""
    counts = Counts(checks={CheckKey("r", "b", "b", "4", "pass"): 3})
    cells = build_cells(counts, DepthBuckets())
    assert cells.rule_arrays(0).passes[0, 0, DepthBuckets().index("3-4")] == 3


def test_build_cells_transitions_axis_order() -> None:
    """Transitions land at [rule, model, handoff, from, to] with handoff order true/false/unknown."""
    counts = Counts(
        transitions={
            TransitionKey("r", "m", "true", "pass", "fail"): 4,
            TransitionKey("r", "m", "false", "fail", "pass"): 6,
            TransitionKey("r", "m", "unknown", "pass", "pass"): 1,
            TransitionKey("r", "m", "false", "pass", "error"): 100,
        }
    )
    t = build_cells(counts, DepthBuckets()).transitions
    assert t[0, 0, 0, 0, 1] == 4
    assert t[0, 0, 1, 1, 0] == 6
    assert t[0, 0, 2, 0, 0] == 1
    assert t.sum() == 11
