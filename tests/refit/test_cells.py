"""Cells: Counts → dense arrays, and the Wilson interval."""

from __future__ import annotations

import numpy as np
import pytest

from handoffmon.counts import CheckKey, Counts, TransitionKey
from handoffmon.depth import DepthBuckets
from handoffmon.refit.cells import build_cells, wilson, z_value
from handoffmon.refit.result import RefitResult


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


def _name_flood_counts(keys: int) -> Counts:
    """``keys`` check keys (and transitions) over 5,000 model and 1,000 rule names."""
    rng = np.random.default_rng(17)
    labels = DepthBuckets().labels
    checks: dict[CheckKey, int] = {}
    transitions: dict[TransitionKey, int] = {}
    for _ in range(keys):
        rule, model, prefix = (int(x) for x in rng.integers(0, (1_000, 5_000, 5_000)))
        bucket = labels[int(rng.integers(0, len(labels)))]
        verdict = "pass" if rng.random() < 0.8 else "fail"
        key = CheckKey(f"rule-{rule}", f"model-{model}", f"model-{prefix}", bucket, verdict)
        checks[key] = int(rng.integers(1, 50))
        transitions[TransitionKey(f"rule-{rule}", f"model-{model}", "true", "pass", verdict)] = 1
    return Counts(checks=checks, transitions=transitions)


def _refit_peak(counts: Counts, max_models: int, max_rules: int) -> tuple[int, RefitResult]:
    """Peak bytes allocated by one refit (tracemalloc), after a warm-up that imports scipy."""
    import tracemalloc

    from handoffmon.config import RefitConfig
    from handoffmon.refit.engine import run_refit

    buckets = DepthBuckets()
    settings = RefitConfig(max_models=max_models, max_rules=max_rules)
    run_refit(Counts(checks={CheckKey("r", "a", "b", "1", "pass"): 1}), buckets=buckets, settings=settings)
    tracemalloc.start()
    try:
        result = run_refit(counts, buckets=buckets, settings=settings)
        return tracemalloc.get_traced_memory()[1], result
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    ("max_models", "max_rules", "bound_mib"),
    [
        (50, 10, 32),  # measured 5.8 MiB
        pytest.param(200, 100, 256, marks=pytest.mark.slow),  # the defaults: measured 70 MiB
    ],
)
def test_a_refit_over_5000_models_and_1000_rules_stays_under_a_memory_bound(
    max_models: int, max_rules: int, bound_mib: int
) -> None:
    """The refit never builds dense K² × R arrays past its caps: 10,000 keys over 5,000 model
    names × 1,000 rule names (dense: 5,002 × 5,000 × 1,000 × D floats, over a terabyte)
    fit in a bounded peak because models and rules past ``refit.max_models`` / ``max_rules``
    are left out and one rule's (K + 2) × K × D arrays exist at a time."""
    counts = _name_flood_counts(10_000)
    peak, result = _refit_peak(counts, max_models, max_rules)
    seen = {k.model for k in counts.checks} | {k.prefix_model for k in counts.checks}
    assert len(result.rules) == max_rules + 1  # + the pooled fit
    assert len(result.excluded_models) == len(seen) - max_models
    assert peak < bound_mib * 2**20, f"refit peak {peak / 2**20:.1f} MiB"


def test_dense_and_sorted_cell_sums_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small cell spaces are summed in dense bins, large ones through a sort: same cells, same sums."""
    from handoffmon.refit import cells as cells_mod
    from tests.refit.synth import plant, synth_counts

    buckets = DepthBuckets((1, 2, 3, 5, 9, 17, 33))
    rng = np.random.default_rng(7)
    counts = synth_counts(plant(6, 3, rng), rng, n_trans=20, buckets=buckets)
    dense = build_cells(counts, buckets)
    monkeypatch.setattr(cells_mod, "_DENSE_CELLS_MAX", -1)
    monkeypatch.setattr(cells_mod, "_DENSE_PER_KEY", 0)
    sorted_ = build_cells(counts, buckets)
    assert len(dense.checks.passes) > 100
    for a, b in ((dense.checks, sorted_.checks), (dense.baseline, sorted_.baseline)):
        for name in ("rule", "prefix", "model", "bucket", "passes", "fails", "depth"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def _same_cells(a: object, b: object) -> None:
    for part in ("checks", "baseline"):
        for name in ("rule", "prefix", "model", "bucket", "passes", "fails", "depth"):
            np.testing.assert_array_equal(getattr(getattr(a, part), name), getattr(getattr(b, part), name))
    for name in ("rules", "models", "excluded_models", "excluded_rules", "clean_baseline", "depth_sums"):
        assert getattr(a, name) == getattr(b, name)
    np.testing.assert_array_equal(a.transitions, b.transitions)  # type: ignore[attr-defined]


def _fresh(counts: Counts, buckets: DepthBuckets) -> object:
    """``build_cells`` with every cached key code dropped first."""
    from handoffmon.refit import cells as cells_mod

    cells_mod._KEY_CODES.clear()
    return build_cells(counts, buckets)


def test_cached_key_codes_give_the_cells_of_a_fresh_coding() -> None:
    """Refits reuse the codes of the keys coded last time when the snapshot starts with them
    (or they start with it): a snapshot that grew (new keys last, as the aggregates' copies
    do), shrank, was reordered or holds equal but new key objects gives the same cells as
    coding it from scratch."""
    from handoffmon.counts import CellStatKey
    from tests.refit.synth import plant, synth_counts

    buckets = DepthBuckets((1, 2, 3, 5, 9, 17, 33))
    rng = np.random.default_rng(11)
    counts = synth_counts(plant(8, 3, rng), rng, n_trans=20, buckets=buckets)
    checks = dict(counts.checks)
    keys = list(checks)
    stats = {CellStatKey(k.rule, k.model, k.prefix_model, k.depth_bucket, "depth"): 3 for k in keys[::7]}
    base = {k: v for k, v in checks.items() if k.model == k.prefix_model}
    half = dict(list(checks.items())[: len(keys) // 2])
    first = Counts(checks=half, cell_stats=stats, baseline_checks=base)
    build_cells(first, buckets)
    grown = Counts(checks=checks, transitions=counts.transitions, cell_stats=stats, baseline_checks=base)
    cases = [
        grown,  # the first half's objects in place, new keys after them
        grown,  # nothing new
        Counts(checks=dict(list(checks.items())[: len(keys) // 3]), baseline_checks=base),  # shrank
        Counts(checks=dict(reversed(list(checks.items()))), cell_stats=stats),  # reordered
        Counts(checks={CheckKey(*k): v for k, v in checks.items()}, cell_stats={}),  # equal, new objects
        Counts(checks={**checks, CheckKey("new-rule", "m-x", "none", "1", "pass"): 4}),  # new names
    ]
    for case in cases:
        cached = build_cells(case, buckets)
        _same_cells(cached, _fresh(case, buckets))


def test_the_code_space_is_dropped_when_it_outgrows_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Names from unrelated sources accumulate only up to ``_NAMES_MAX``; then coding starts afresh."""
    from handoffmon.refit import cells as cells_mod

    monkeypatch.setattr(cells_mod, "_NAMES_MAX", 50)
    cells_mod._KEY_CODES.clear()
    for i in range(20):
        counts = Counts(checks={CheckKey(f"r{i}", f"a{i}", f"b{i}", "1", "pass"): 1})
        assert build_cells(counts, DepthBuckets()).models == (f"a{i}", f"b{i}")
        assert len(cells_mod._KEY_CODES.factors().names) <= 50 + 10


def test_cluster_sums_are_the_whole_cell_stats_of_kept_cells() -> None:
    """Cluster sums keep CLUSTER_STATS at the whole-cell bucket of kept rules (and the pooled
    ``all``), prefixes (models, none, unknown) and models; anything else is left out."""
    from handoffmon.counts import CELL_STATS, CELL_TOTAL, CLUSTER_STATS, CellStatKey

    rng = np.random.default_rng(23)
    names = ["a", "b", "c", "none", "unknown", "gone"]
    stats: dict[CellStatKey, int] = {}
    for _ in range(400):
        rule = ["r1", "r2", "all", "r-unknown"][int(rng.integers(0, 4))]
        model, prefix = (names[int(i)] for i in rng.integers(0, len(names), 2))
        bucket = CELL_TOTAL if rng.random() < 0.8 else "1"
        stat = CELL_STATS[int(rng.integers(0, 5))]
        stats[CellStatKey(rule, model, prefix, bucket, stat)] = int(rng.integers(1, 9))
    checks = {CheckKey(r, m, m, "1", "pass"): 1 for r in ("r1", "r2") for m in ("a", "b", "c")}
    cells = build_cells(Counts(checks=checks, cell_stats=stats), DepthBuckets())
    r_idx = {**{r: i for i, r in enumerate(cells.rules)}, "all": len(cells.rules)}
    m_idx = {m: i for i, m in enumerate(cells.models)}
    p_idx = {p: i for i, p in enumerate(cells.prefixes)}
    want: dict[tuple[int, int, int], np.ndarray] = {}
    for s, v in stats.items():  # the definition, key by key
        if s.stat in CLUSTER_STATS and s.depth_bucket == CELL_TOTAL:
            key = (r_idx.get(s.rule, -1), p_idx.get(s.prefix_model, -1), m_idx.get(s.model, -1))
            if min(key) >= 0:
                want.setdefault(key, np.zeros(4))[CLUSTER_STATS.index(s.stat)] += v
    got = cells.clusters
    assert set(got) == set(want) and len(want) > 20
    for key, v in want.items():
        np.testing.assert_array_equal(got[key], v)
    for r in range(len(cells.rules) + 1):
        arr = cells.cluster_array(r)
        for (rr, p, m), v in want.items():
            if rr == r:
                np.testing.assert_array_equal(arr[p, m], v)
        assert arr.sum() == sum(v.sum() for (rr, _, _), v in want.items() if rr == r)
    assert cells.clustered
