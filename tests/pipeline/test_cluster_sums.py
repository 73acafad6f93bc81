"""The live pipeline's clean baseline and per-cell cluster sums (the refit's clustered intervals)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
from prometheus_client import CollectorRegistry

from handoffmon.counts import CELL_TOTAL, CLUSTER_STATS, POOLED_RULE, CellStatKey, CheckKey
from handoffmon.exporters.prometheus import PrometheusExporter
from handoffmon.labels import LabelGuard
from handoffmon.pipeline.aggregates import Aggregates, load_counts_sqlite
from handoffmon.pipeline.state import MAX_CELLS, ConversationState
from handoffmon.testing import make_turn_result
from handoffmon.types import CheckResult, Verdict
from tests.pipeline.helpers import AUTHORS_4_7, monitor, run_conversation

LONG = "this reply is much too long for the rule"


def _direct_sums(per_conv: dict[tuple[str, str, str, int], list[int]]) -> Counter[tuple[str, str, str, str]]:
    """G, Σy², Σyn, Σn² per cell from the final per-conversation (y, n): the definition."""
    out: Counter[tuple[str, str, str, str]] = Counter()
    for (rule, model, prefix, _), (y, n) in per_conv.items():
        for stat, v in zip(CLUSTER_STATS, (1, y * y, y * n, n * n), strict=True):
            out[(rule, model, prefix, stat)] += v
    return out


def test_incremental_cluster_sums_equal_the_sums_over_conversations() -> None:
    """Random turns of 40 interleaved conversations (two rules, handoffs, unclean same-author
    turns, not_applicable verdicts): the increments ``tally`` emits add up to G, Σy², Σyn,
    Σn² computed from each conversation's final counts, per rule and pooled over rules."""
    rng = np.random.default_rng(4)
    states: dict[int, ConversationState] = {}
    got: Counter[tuple[str, str, str, str]] = Counter()
    per_conv: dict[tuple[str, str, str, int], list[int]] = {}
    verdicts: tuple[Verdict, ...] = ("pass", "fail", "not_applicable")
    for _ in range(3000):
        c = int(rng.integers(40))
        author, prefix = (str(x) for x in rng.choice(["a", "b", "c"], 2))
        clean = bool(rng.random() < 0.5)
        checks = tuple(CheckResult(r, verdicts[int(rng.choice(3, p=(0.6, 0.3, 0.1)))]) for r in ("r1", "r2"))
        states[c], steps = states.get(c, ConversationState()).tally(author, prefix, clean, checks)
        for step in steps:
            for stat, v in zip(CLUSTER_STATS, step[1:], strict=True):
                got[(step.rule, author, prefix, stat)] += v
        if prefix == author and not clean:
            assert steps == ()
            continue
        for ch in checks:
            if ch.verdict == "not_applicable":
                continue
            for rule in (ch.rule, POOLED_RULE):
                yn = per_conv.setdefault((rule, author, prefix, c), [0, 0])
                yn[0] += ch.verdict == "pass"
                yn[1] += 1
    want = _direct_sums(per_conv)
    assert +got == +want
    assert max(v for (_, _, _, s), v in want.items() if s == "n2") > 50  # real clusters, not singletons


def test_state_round_trips_and_caps_its_cells() -> None:
    """Partial counts survive the store's JSON form; past MAX_CELLS a new cell's checks count as
    one-check clusters instead of growing the state."""
    state = ConversationState()
    for i in range(MAX_CELLS // 2 + 3):
        state, steps = state.tally(f"m{i}", "x", False, (CheckResult("r", "pass"),))
        assert [tuple(s) for s in steps] == [("r", 1, 1, 1, 1), (POOLED_RULE, 1, 1, 1, 1)]
    assert len(state.cells) == MAX_CELLS
    assert ConversationState.from_mapping(state.to_mapping()).cells == state.cells
    again, steps = state.tally("m0", "x", False, (CheckResult("r", "fail"),))  # a kept cell grows
    assert [tuple(s) for s in steps] == [("r", 0, 0, 1, 3), (POOLED_RULE, 0, 0, 1, 3)]
    assert again.cells[("r", "m0", "x")] == (1, 2)
    _, steps = again.tally("new", "x", False, (CheckResult("r", "pass"),))
    _, steps2 = again.tally("new", "x", False, (CheckResult("r", "pass"),))
    assert steps == steps2 and steps[0].conversations == 1  # not kept: every check a new cluster


def test_monitor_keeps_the_clean_baseline_and_cell_sums() -> None:
    """a a a b b b a a a a: only turns 2–3 (a after a, nothing else in the history) are clean
    baseline; b after b and a after b-then-a are not. Handoff cells get depth and cluster sums."""
    replies = [f"ok {i}" if i % 3 else LONG for i in range(10)]  # turns 1, 4, 7, 10 fail
    with monitor() as m:
        run_conversation(m, AUTHORS_4_7, replies)
        assert m.flush(10)
        snap = m.snapshot()
    assert snap.baseline_checks == {
        CheckKey("short", "a", "a", "2", "pass"): 1,
        CheckKey("short", "a", "a", "3-4", "pass"): 1,
    }
    stats = snap.cell_stats
    assert stats[CellStatKey("short", "a", "a", "2", "depth")] == 2
    assert stats[CellStatKey("short", "a", "a", "3-4", "depth")] == 3
    assert CellStatKey("short", "b", "b", "5-8", "depth") not in stats  # b's history holds a's text
    assert stats[CellStatKey("short", "b", "a", "3-4", "depth")] == 4
    # a after none (turn 1 fails) and a after b (turn 7 fails): one conversation each, y = 0, n = 1
    for prefix in ("none", "b"):
        for rule in ("short", POOLED_RULE):
            got = [stats.get(CellStatKey(rule, "a", prefix, CELL_TOTAL, s), 0) for s in CLUSTER_STATS]
            assert got == [1, 0, 0, 1], (rule, prefix)
    # the clean a-after-a cell: one conversation, 2 passes in 2 checks
    got = [stats.get(CellStatKey("short", "a", "a", CELL_TOTAL, s), 0) for s in CLUSTER_STATS]
    assert got == [1, 4, 4, 4]


def test_sqlite_and_prometheus_carry_the_sums(tmp_path: Path) -> None:
    """The same turns into SQLite-persisted aggregates and a Prometheus exporter: the file holds
    exactly the snapshot's baseline and cell sums, and the exporter's series add up to them
    (model over the label cap → `other`, the pooled rule and `*` kept)."""
    path = str(tmp_path / "agg.db")
    agg = Aggregates(path)
    registry = CollectorRegistry()
    exporter = PrometheusExporter(registry, guard=LabelGuard(max_models=2))
    state = ConversationState()
    for depth, (author, prefix, verdict) in enumerate(
        [
            ("a", "none", "pass"),
            ("a", "a", "pass"),
            ("a", "a", "fail"),
            ("b", "a", "pass"),
            ("z", "b", "fail"),
        ],
        start=1,
    ):
        clean = prefix == author
        checks: tuple[tuple[str, Verdict], ...] = (("r", verdict),)
        turn = make_turn_result(depth=depth, author=author, prefix_model=prefix, checks=checks)
        state, cluster = state.tally(author, prefix, clean, turn.checks)
        turn = replace(turn, clean=clean, cluster=cluster)
        agg.add_turn(turn)
        assert exporter.export(turn)
    snap = agg.snapshot()
    agg.close()
    stored = load_counts_sqlite(path)
    assert stored.cell_stats == snap.cell_stats and stored.baseline_checks == snap.baseline_checks
    assert snap.cell_stats[CellStatKey("r", "a", "a", CELL_TOTAL, "y2")] == 1  # y = 1 after two checks
    assert snap.cell_stats[CellStatKey("r", "a", "a", CELL_TOTAL, "n2")] == 4
    exported: Counter[tuple[str, ...]] = Counter()
    for family in registry.collect():
        if family.name == "handoffmon_cell_stats":
            for s in family.samples:
                if s.name.endswith("_total"):
                    lab = s.labels
                    key = (lab["rule"], lab["model"], lab["prefix_model"], lab["depth_bucket"], lab["stat"])
                    exported[key] += int(s.value)
    expected: Counter[tuple[str, ...]] = Counter()
    for key, v in snap.cell_stats.items():
        model = key.model if key.model in ("a", "b") else "other"
        expected[(key.rule, model, key.prefix_model, key.depth_bucket, key.stat)] += v
    assert +exported == +expected
    assert ("all", "a", "a", "*", "n2") in exported


def test_aggregates_keep_names_capped_like_the_exported_labels() -> None:
    """telemetry.max_models = 2, four authors: the in-process aggregates keep a, b and `other`
    (the turns of c and d are still counted), with the exporters' guard, whose usage gauge
    reports the cap reached."""
    from handoffmon.exporters.prometheus import PrometheusExporter as Prom
    from tests.pipeline.helpers import make_config, runtime

    rt = runtime(make_config(telemetry={"max_models": 2}))
    try:
        run_conversation(rt.monitor, ["a", "b", "c", "d", "c"])
        assert rt.monitor.flush(10)
        snap = rt.monitor.snapshot()
    finally:
        rt.close()
    assert {k.model for k in snap.turns} == {"a", "b", "other"}
    assert {k.prefix_model for k in snap.turns} == {"none", "a", "b", "other"}
    assert sum(snap.turns.values()) == 5
    assert {k.model for k in snap.cell_stats} == {"a", "b", "other"}
    prom = next(e for e in rt.monitor.exporters if isinstance(e, Prom))
    assert prom.guard is rt.monitor.guard
    assert prom.guard.usage()["model"] == (2, 2)
