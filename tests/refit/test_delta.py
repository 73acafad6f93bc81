"""Δ(A→B): within-bucket depth adjustment, clustered intervals, the pooled fit's turn clustering."""

from __future__ import annotations

import numpy as np
import pytest

from handoffmon.config import RefitConfig
from handoffmon.counts import CELL_TOTAL, CellStatKey, CheckKey, Counts
from handoffmon.depth import DepthBuckets
from handoffmon.refit import refit
from handoffmon.sim.counting import counts_from_rows
from handoffmon.sim.population import PopModel, Population, TurnRows, simulate

BUCKETS = DepthBuckets((1, 2, 3, 5, 9, 17, 33))


def _bunched_counts(n: int = 200_000) -> Counts:
    """Adherence 0.95 − 0.01·(d − 1) (no handoff effect); baseline spread over each bucket,
    handoffs all at the bucket's last depth."""
    checks: dict[CheckKey, int] = {}
    stats: dict[CellStatKey, int] = {}
    rng = np.random.default_rng(0)
    for lo, hi in ((3, 4), (5, 8), (9, 16), (17, 32)):
        for prefix, depths in (("b", range(lo, hi + 1)), ("a", [hi])):
            tot_n = tot_x = tot_d = 0
            for d in depths:
                m = n // len(depths) if prefix == "b" else n // 10
                x = int(rng.binomial(m, 0.95 - 0.01 * (d - 1)))
                tot_n, tot_x, tot_d = tot_n + m, tot_x + x, tot_d + d * m
            label = BUCKETS.bucket(lo)
            checks[CheckKey("r", "b", prefix, label, "pass")] = tot_x
            checks[CheckKey("r", "b", prefix, label, "fail")] = tot_n - tot_x
            stats[CellStatKey("r", "b", prefix, label, "depth")] = tot_d
    # a's own cell keeps it in the model list
    checks[CheckKey("r", "a", "none", "1", "pass")] = 100
    return Counts(checks=checks, cell_stats=stats)


def test_handoffs_at_the_deep_end_of_buckets_do_not_bias_delta() -> None:
    """With per-cell depth sums the baseline is read at the handoffs' mean depth: Δ ≈ 0."""
    counts = _bunched_counts()
    adjusted = refit(counts, buckets=BUCKETS, now=0).rules["r"].pair("a", "b")
    plain = refit(Counts(checks=counts.checks), buckets=BUCKETS, now=0).rules["r"].pair("a", "b")
    assert adjusted is not None and plain is not None
    assert plain.delta < -0.03  # the bucket's deep end decays: unadjusted Δ is biased
    assert abs(adjusted.delta) < 0.004
    assert adjusted.ci_low <= 0 <= adjusted.ci_high


def _correlated_rules(rules: int) -> Counts:
    """Population whose R rules are the same check (identical verdicts): one turn, R copies."""
    pop = Population(
        models=(PopModel("a"), PopModel("b")), rules=("r0",), rule_offsets=(0.0,), handoff_rate=0.2
    )
    rows = simulate(pop, 1500, seed=4)
    counts = counts_from_rows(rows, BUCKETS)
    if rules == 1:
        return counts

    def copy(table):  # type: ignore[no-untyped-def]
        out = {}
        for key, v in table.items():
            for i in range(rules):
                new = key._replace(rule=f"r{i}") if key.rule != "all" else key
                out[new] = out.get(new, 0) + v if key.rule == "all" else v
        return out

    stats = {}
    for key, v in counts.cell_stats.items():
        if key.rule == "all":  # one turn = one cluster member with R checks: y, n scale by R
            scale = {"conversations": 1, "y2": rules**2, "yn": rules**2, "n2": rules**2}.get(key.stat, rules)
            stats[key] = v * scale
        else:
            for i in range(rules):
                stats[key._replace(rule=f"r{i}")] = v
    return Counts(checks=copy(counts.checks), baseline_checks=copy(counts.baseline_checks), cell_stats=stats)


def test_pooled_fit_clusters_turns_not_checks() -> None:
    """Three identical rules carry no more information than one: the pooled interval is as
    wide as the single rule's (treating checks as independent would shrink it by √3)."""
    one = refit(_correlated_rules(1), buckets=BUCKETS, now=0).rules["all"].pair("a", "b")
    three = refit(_correlated_rules(3), buckets=BUCKETS, now=0).rules["all"].pair("a", "b")
    assert one is not None and three is not None
    assert three.delta == pytest.approx(one.delta, abs=1e-9)
    width1, width3 = one.ci_high - one.ci_low, three.ci_high - three.ci_low
    assert width3 == pytest.approx(width1, rel=0.1)


def test_cluster_sums_widen_intervals_when_conversations_differ() -> None:
    """Strong per-conversation difficulty: clustered design effect > 1 and a wider interval
    than the same counts without cluster sums."""
    models = (PopModel("a", base=0.8), PopModel("b", base=0.8))
    pop = Population(models=models, conversation_sd=0.15, turn_rho=0.9,
                     handoff_rate=0.15, pingpong_share=0.3)  # fmt: skip
    counts = counts_from_rows(simulate(pop, 800, seed=2), BUCKETS)
    clustered = refit(counts, buckets=BUCKETS, now=0).rules["rule_a"].pair("a", "b")
    stats = {k: v for k, v in counts.cell_stats.items() if k.depth_bucket != CELL_TOTAL}
    naive = refit(Counts(checks=counts.checks, baseline_checks=counts.baseline_checks, cell_stats=stats),
                  buckets=BUCKETS, now=0).rules["rule_a"].pair("a", "b")  # fmt: skip
    assert clustered is not None and naive is not None
    assert clustered.design_effect > 1.5
    assert clustered.ci_high - clustered.ci_low > naive.ci_high - naive.ci_low
    assert clustered.se > naive.se


def _few_conversations_rows(rng: np.random.Generator) -> TurnRows:
    """A→B carried by 10 conversations of 1 to 30 handoff turns (N²/Σn² ≈ 4 effective ones, the
    largest bringing 42% of the checks, as a ping-pong conversation does); B's clean baseline
    from 300 conversations of 3 turns. Every conversation draws its own pass probability from
    Beta(2, 0.5) (mean 0.8, intra-conversation correlation 0.29), the same law in both arms:
    no handoff effect."""
    sizes = (1, 1, 2, 2, 3, 4, 6, 9, 14, 30)
    conv: list[int] = []
    depth: list[int] = []
    model: list[int] = []
    prefix: list[int] = []
    for c, s in enumerate(sizes):
        conv += [c] * (s + 1)
        depth += [1] + [2] * s
        model += [0] + [1] * s
        prefix += [-1] + [0] * s
    for c in range(len(sizes), len(sizes) + 300):
        conv += [c] * 4
        depth += [1, 2, 2, 2]
        model += [1] * 4
        prefix += [-1, 1, 1, 1]
    c_arr, p_arr = np.array(conv), np.array(prefix)
    p_conv = rng.beta(2.0, 0.5, int(c_arr.max()) + 1)
    verdict = (rng.random(len(c_arr)) >= p_conv[c_arr]).astype(np.int64)
    zero = np.zeros(len(c_arr))
    return TurnRows(("a", "b"), ("r",), c_arr, np.array(depth), np.array(model), p_arr,
                    np.zeros(len(c_arr), dtype=np.int64), verdict, zero, zero, p_arr == 0, 0.0)  # fmt: skip


@pytest.mark.slow
def test_a_cell_carried_by_few_conversations_keeps_its_level() -> None:
    """No effect, a handoff cell dominated by a few conversations: the t reference (effective
    conversations − 1 degrees of freedom) keeps false positives within twice nominal at 5%
    and 1% over 500 replicates (binomial SE 1.0 and 0.45 points). The normal reference gave
    18% and 8.2% on this design (1,000 replicates)."""
    rng = np.random.default_rng(3)
    p = []
    for _ in range(500):
        pair = refit(counts_from_rows(_few_conversations_rows(rng), BUCKETS), buckets=BUCKETS, now=0)
        effect = pair.rules["r"].pair("a", "b")
        assert effect is not None and effect.observed
        p.append(effect.p_value)
    ps = np.array(p)
    assert np.isfinite(ps).all()
    assert np.mean(ps < 0.05) <= 0.10
    assert np.mean(ps < 0.01) <= 0.02


def _sparse_edge_baseline() -> Counts:
    """b's clean baseline: 200 turns at depth 5 (90% pass) and one failed turn at depth 4;
    nothing deeper. Handoffs a→b: 200 turns at depth 8, 90% pass (no handoff effect)."""
    checks = {
        CheckKey("r", "b", "b", "5-8", "pass"): 180,
        CheckKey("r", "b", "b", "5-8", "fail"): 20,
        CheckKey("r", "b", "b", "3-4", "fail"): 1,
        CheckKey("r", "b", "a", "5-8", "pass"): 180,
        CheckKey("r", "b", "a", "5-8", "fail"): 20,
        CheckKey("r", "a", "none", "1", "pass"): 100,
    }
    stats = {
        CellStatKey("r", "b", "b", "5-8", "depth"): 5 * 200,
        CellStatKey("r", "b", "b", "3-4", "depth"): 4,
        CellStatKey("r", "b", "a", "5-8", "depth"): 8 * 200,
    }
    return Counts(checks=checks, cell_stats=stats)


def test_depth_adjustment_does_not_extrapolate_from_a_sparse_bucket() -> None:
    """The handoff cell's mean depth (8) lies beyond every baseline bucket mean (5, 4): reading
    the baseline there by extrapolating the line through depths 4 and 5 gave
    0.9 + 3·(0.9 − 0) = 3.6, a baseline above 1 and Δ = −2.7. A one-turn neighbour is no
    ground to extrapolate from (``EXTRAPOLATE_MIN_N``): the baseline is read at its own
    bucket mean, so Δ ≈ 0 (well-populated neighbours still extrapolate: the test above)."""
    pair = refit(_sparse_edge_baseline(), buckets=BUCKETS, now=0).rules["r"].pair("a", "b")
    assert pair is not None and pair.observed
    assert abs(pair.delta) < 1e-9
    assert -1.0 <= pair.ci_low <= pair.delta <= pair.ci_high <= 1.0


def _window_counts(straddles: bool) -> Counts:
    """b's clean baseline from 40 conversations at 90%; the handoff cell a→b from one ping-pong
    conversation that passes 20 of its 40 checks in the window. ``straddles``: it began before
    the window with 9 of 10 passed in the cell, so the window's increase of its sums has G = 0
    and Σn² = 50² − 10² (a windowed Prometheus source); else it lies wholly inside (G = 1)."""
    checks: dict[CheckKey, int] = {}
    stats: dict[CellStatKey, int] = {}
    rng = np.random.default_rng(7)
    g = y2 = yn = n2 = x_tot = n_tot = 0
    for _ in range(40):
        n = int(rng.integers(5, 15))
        y = int(rng.binomial(n, 0.9))
        g, y2, yn, n2, x_tot, n_tot = g + 1, y2 + y * y, yn + y * n, n2 + n * n, x_tot + y, n_tot + n
    checks[CheckKey("r", "b", "b", "3-4", "pass")] = x_tot
    checks[CheckKey("r", "b", "b", "3-4", "fail")] = n_tot - x_tot
    checks[CheckKey("r", "b", "a", "3-4", "pass")] = 20
    checks[CheckKey("r", "b", "a", "3-4", "fail")] = 20
    checks[CheckKey("r", "a", "none", "1", "pass")] = 100
    y0, n0 = (9, 10) if straddles else (0, 0)
    y, n = y0 + 20, n0 + 40
    handoff = (int(not straddles), y * y - y0 * y0, y * n - y0 * n0, n * n - n0 * n0)
    for prefix, values in (("b", (g, y2, yn, n2)), ("a", handoff)):
        for stat, v in zip(("conversations", "y2", "yn", "n2"), values, strict=True):
            stats[CellStatKey("r", "b", prefix, CELL_TOTAL, stat)] = v
    return Counts(checks=checks, baseline_checks=dict(checks), cell_stats=stats)


def test_a_window_cell_of_one_conversation_that_began_before_it_stays_one_conversation() -> None:
    """Over a window a conversation that began earlier adds to Σn² but not to G. A cell carried
    by one such conversation read G = 0 as "no cluster sums": 40 independent turns, Δ = −0.4
    with an interval of [−0.54, −0.25] and flagged. It is one conversation: the same interval as
    when the conversation lies inside the window, and not significant."""
    settings = RefitConfig(min_n=30)
    windowed, inside = (
        refit(_window_counts(s), buckets=BUCKETS, settings=settings, now=0).rules["r"].pair("a", "b")
        for s in (True, False)
    )
    assert windowed is not None and inside is not None and windowed.observed
    assert windowed.delta < -0.3
    assert windowed.design_effect == inside.design_effect == 40.0
    assert (windowed.ci_low, windowed.ci_high) == pytest.approx((inside.ci_low, inside.ci_high))
    assert windowed.ci_low < -0.8 and windowed.ci_high > 0 and not windowed.significant


@pytest.mark.parametrize("rules", [1, 8])
def test_pooled_delta_into_a_model_clusters_turns_not_checks(rules: int) -> None:
    """With two models every handoff into b comes from a, so Δ into b is Δ(a→b) and its interval
    is the pair's. Pooled over eight identical rules it stays so; the into arm's effective n was
    summed over the rules' own design effects, counting a turn's eight checks as eight
    independent ones (the interval 0.110 wide instead of 0.113)."""
    fit = refit(_correlated_rules(rules), buckets=BUCKETS, now=0).rules["all"]
    into, pair = fit.models["b"], fit.pair("a", "b")
    assert pair is not None and into.into_n == round(pair.n * pair.coverage)
    assert into.into_delta == pytest.approx(pair.delta, abs=1e-12)
    assert into.into_ci_low == pytest.approx(pair.ci_low, abs=3e-4)
    assert into.into_ci_high == pytest.approx(pair.ci_high, abs=3e-4)


def _into_counts(with_one_conversation: bool) -> Counts:
    """c's clean baseline: 400 one-check conversations at 90%; b→c: 400 one-check handoffs at
    85%; a→c (optional): one ping-pong conversation of 40 handoffs into c, 30 passed."""
    checks: dict[CheckKey, int] = {}
    stats: dict[CellStatKey, int] = {}
    cells = [("c", 360, 400, 400), ("b", 340, 400, 400)]
    if with_one_conversation:
        cells.append(("a", 30, 40, 1))
    for prefix, x, n, g in cells:
        checks[CheckKey("r", "c", prefix, "3-4", "pass")] = x
        checks[CheckKey("r", "c", prefix, "3-4", "fail")] = n - x
        size = n // g
        y = x // g if g > 1 else x
        ys = [1] * x + [0] * (n - x) if g > 1 else [y]
        sums = (g, sum(v * v for v in ys), sum(v * size for v in ys), g * size * size)
        for stat, v in zip(("conversations", "y2", "yn", "n2"), sums, strict=True):
            stats[CellStatKey("r", "c", prefix, CELL_TOTAL, stat)] = v
    for m in ("a", "b"):
        checks[CheckKey("r", m, "none", "1", "pass")] = 100
    return Counts(checks=checks, baseline_checks={k: v for k, v in checks.items() if k.prefix_model == "c"},
                  cell_stats=stats)  # fmt: skip


def test_delta_into_a_model_weights_each_cell_by_its_checks() -> None:
    """The into arm's pass rate pools the cells by checks, so 40 checks of one conversation carry
    9% of its weight as one cluster: adding them widens the interval (effective n 440²/(40·40 +
    400) ≈ 97, not 400 + 40/40 = 401 from summing each cell's n/deff, which left it as it was)."""
    settings = RefitConfig(min_n=30)
    without, with_one = (
        refit(_into_counts(w), buckets=BUCKETS, settings=settings, now=0).rules["r"].models["c"]
        for w in (False, True)
    )
    assert with_one.into_n == 440 and without.into_n == 400
    assert with_one.into_ci_high - with_one.into_ci_low > 1.3 * (without.into_ci_high - without.into_ci_low)


def test_interval_agrees_with_the_reported_standard_error() -> None:
    """The interval's arms take the effective n whose binomial variance is the arm's clustered,
    depth-stratified variance (Korn & Graubard), so its half-width is the t quantile times the
    reported ``se``. The baseline arm had n² / Σ Ω_j²/n_j / deff: exact for one bucket, but for a
    model near 100% whose handoffs sit deep (ping-pong) and whose baseline's pass rate falls with
    depth, its variance was the pooled p(1 − p) in place of the deep buckets' larger one — pairs
    into atlas (97%) had ``se`` 1.2–1.4 times the interval's, and held no effect 0.88–0.92 of the
    time (Δ into atlas 0.83)."""
    from handoffmon.sim.calibration import standard_population

    rows = simulate(standard_population(), 3000, seed=np.random.default_rng([11, 0]))
    fit = refit(counts_from_rows(rows, DepthBuckets()), buckets=DepthBuckets(), now=0).rules["rule_0"]
    ratios = {
        f"{p.prefix_model}->{p.model}": p.se / ((p.ci_high - p.ci_low) / (2 * 1.959964))
        for p in fit.pairs
        if p.observed
    }
    assert len(ratios) == 20 and sum(1 for r in ratios if r.endswith("->atlas")) == 4
    assert all(0.85 < r < 1.02 for r in ratios.values()), ratios  # t quantile ≥ z: below 1


def test_delta_into_each_model_is_significant_after_bh_over_the_fits_models() -> None:
    """HandoffsIntoModelHurt tests one interval per model and fit, so Δ into B carries a
    p-value dual to its interval and a Benjamini–Hochberg flag over the fit's models, as the
    pairs do. On a 10-model fleet with handoffs into model 1 planted at −15 pp: p < 0.05
    exactly where the 95% interval excludes 0, the adjusted p-values are BH of the raw ones over
    the models with a Δ into them, and model 1 is significant."""
    from handoffmon.refit.multiplicity import bh_adjust
    from handoffmon.sim.alert_calibration import wide_population
    from handoffmon.sim.counting import counts_from_rows_fast

    pop = wide_population(10, sparse=2, harmful=((0, 1), (2, 1), (3, 1)))
    rows = simulate(pop, 4000, seed=np.random.default_rng([7, 0]))
    result = refit(counts_from_rows_fast(rows, DepthBuckets()), buckets=DepthBuckets(), now=0.0)
    models = result.rules[pop.rules[0]].models
    tested = [m for m, s in models.items() if np.isfinite(s.into_delta)]
    assert len(tested) >= 6
    p = np.array([models[m].into_p_value for m in tested])
    q = np.array([models[m].into_p_adjusted for m in tested])
    assert np.all(np.isfinite(p)) and q == pytest.approx(bh_adjust(p), abs=1e-12)
    for m in tested:
        s = models[m]
        assert (s.into_p_value < 0.05) == (s.into_ci_high < 0 or s.into_ci_low > 0), (m, s)
        assert s.into_significant == (s.into_p_adjusted <= result.fdr), (m, s)
    assert all(
        not np.isfinite(s.into_p_value) and not s.into_significant
        for m, s in models.items()
        if m not in tested
    )
    hurt = models[pop.names[1]]
    assert hurt.into_ci_high < -0.05 and hurt.into_significant
