"""Conversation-clustered intervals from the live pipeline, checked against planted truth.

The production-like population (per-conversation difficulty, ping-pong, canary, handoffs
at bucket ends) is replayed through a real ``Monitor`` (attribution, checkers, per-
conversation state, aggregates). The live aggregates must equal what the turn-level
reference (``sim.counting``, the SQL of the turn-log source) computes from the same rows
— clean baseline, depth sums and cluster sums included — so the refit's clustered SE is
the same on both paths, and the false-significant rate under a planted null stays near
nominal on the live path too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from handoffmon.config import RefitConfig
from handoffmon.counts import CELL_TOTAL, Counts
from handoffmon.depth import DepthBuckets
from handoffmon.pipeline.monitor import Monitor
from handoffmon.refit import refit
from handoffmon.sim.calibration import calibrate, standard_population
from handoffmon.sim.counting import counts_from_rows
from handoffmon.sim.live import live_config, replay
from handoffmon.sim.population import Population, TurnRows, simulate
from handoffmon.sources.sqlite import read_sqlite
from handoffmon.stores.memory import MemoryStore

BUCKETS = DepthBuckets()


def _population(rules: int = 1) -> Population:
    return replace(standard_population(rules=rules), not_applicable_rate=0.0)


def live_counts(rows: TurnRows, **sections: object) -> Counts:
    """The live aggregates of ``rows`` replayed through a real Monitor."""
    with Monitor(live_config(rows, BUCKETS, **sections), store=MemoryStore()) as monitor:
        replay(rows, monitor)
        counts = monitor.snapshot()
    assert counts.dropped == 0 and not counts.monitor_errors
    return counts


def _nonzero(table: Mapping[Any, int]) -> dict[Any, int]:
    return {k: v for k, v in table.items() if v}


def _assert_same_refit_inputs(live: Counts, ref: Counts) -> None:
    """Every counter the refit reads is equal (the reference keeps explicit zeros)."""
    for name in ("checks", "baseline_checks", "cell_stats", "transitions", "turns"):
        assert _nonzero(getattr(live, name)) == _nonzero(getattr(ref, name)), name


def test_live_aggregates_equal_the_turn_level_reference_and_give_the_same_clustered_se() -> None:
    """Two rules (so the pooled `all` cluster sums count a turn's checks together): every refit
    input is equal, hence every Δ's SE and design effect; the design effects are > 1 (the
    population is clustered) and dropping the cluster sums shrinks the SEs."""
    rows = simulate(_population(rules=2), 100, seed=11)
    live, ref = live_counts(rows), counts_from_rows(rows, BUCKETS)
    _assert_same_refit_inputs(live, ref)
    pooled = {s for s in live.cell_stats if s.rule == "all" and s.depth_bucket == CELL_TOTAL}
    assert pooled, "pooled cluster sums missing"
    settings = RefitConfig(min_n=5)
    got = refit(live, buckets=BUCKETS, settings=settings, now=0.0)
    want = refit(ref, buckets=BUCKETS, settings=settings, now=0.0)
    assert got.clustered and want.clustered
    naive = refit(replace(live, cell_stats={}), buckets=BUCKETS, settings=settings, now=0.0)
    for rule in ("rule_0", "all"):
        pairs = {(p.prefix_model, p.model): p for p in got.rules[rule].pairs if p.observed}
        ref_pairs = {(p.prefix_model, p.model): p for p in want.rules[rule].pairs if p.observed}
        assert pairs.keys() == ref_pairs.keys() and len(pairs) >= 5
        for key, p in pairs.items():
            assert p.se == pytest.approx(ref_pairs[key].se, rel=1e-12, abs=1e-15), key
            assert p.design_effect == pytest.approx(ref_pairs[key].design_effect, rel=1e-12), key
        assert max(p.design_effect for p in pairs.values()) > 1.2
        naive_se = {(p.prefix_model, p.model): p.se for p in naive.rules[rule].pairs if p.observed}
        assert np.mean([pairs[k].se / naive_se[k] for k in pairs if k in naive_se]) > 1.05


def test_sqlite_aggregates_of_the_live_pipeline_keep_the_cluster_sums(tmp_path: Path) -> None:
    """A monitor persisting to SQLite: the file read back (the SQLite source) holds the same
    clean-baseline counts and cell sums as the live snapshot and the turn-level reference."""
    rows = simulate(_population(), 40, seed=12)
    db = tmp_path / "hm.sqlite"
    live = live_counts(rows, store={"backend": "sqlite", "path": str(db)})
    stored = read_sqlite(db)
    assert stored.cell_stats == live.cell_stats and stored.cell_stats
    assert stored.baseline_checks == live.baseline_checks and stored.baseline_checks
    _assert_same_refit_inputs(stored, counts_from_rows(rows, BUCKETS))


@pytest.mark.slow
def test_live_path_false_significant_rate_is_near_nominal() -> None:
    """Planted null through the live pipeline: per-pair false `significant` and coverage at
    the promise within three binomial SEs (the turn-level calibration test's bounds). Slow:
    every replicate is ~18,000 real turns through attribution and checkers."""
    cal = calibrate(_population(), replicates=4, conversations=1500, seed=303, count=live_counts)
    assert cal.null_pairs >= 40
    assert cal.false_rate <= 0.06 + 3 * math.sqrt(0.06 * 0.94 / cal.null_pairs)
    half = 3 * math.sqrt(0.05 * 0.95 / cal.reported)
    assert 0.93 - half <= cal.coverage <= 0.97 + half
