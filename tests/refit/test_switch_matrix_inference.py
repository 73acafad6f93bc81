"""Switch-matrix inference: degenerate pairs, min_n, script-level resampling, BH false-discovery control."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from handoffmon.refit.bootstrap import bca_means, cluster_bca_means
from handoffmon.refit.switch_matrix import ScoreTable, switch_matrix


def _null_rows(
    rng: np.random.Generator, k: int, scripts: int, runs: int
) -> list[tuple[str, str, str, float]]:
    """Binary final-turn scores with no handoff effect: per-script difficulty, every cell alike."""
    rows = []
    for s in range(scripts):
        p = float(np.clip(rng.normal(0.6, 0.15), 0.05, 0.95))
        for r in range(runs):
            for a in range(k):
                for b in range(k):
                    rows.append((f"task{s}#{r}", f"m{a}", f"m{b}", float(rng.random() < p)))
    return rows


def test_degenerate_pair_gets_no_interval_and_is_never_significant() -> None:
    """δ = 1 in all 30 episodes (A→B always passes, B→B never): Δ = 1 is reported, but no interval or test."""
    rows = [(f"t#{i}", "a", "b", 1.0) for i in range(30)] + [(f"t#{i}", "b", "b", 0.0) for i in range(30)]
    rows += [(f"t#{i}", "a", "a", float(i % 2)) for i in range(30)]
    rows += [(f"t#{i}", "b", "a", float(i % 3 == 0)) for i in range(30)]
    res = switch_matrix(ScoreTable.from_rows(rows), resamples=300, seed=0)
    pair = res.fit.pair("a", "b")
    assert pair is not None and pair.observed and pair.delta == 1.0
    assert math.isnan(pair.ci_low) and math.isnan(pair.ci_high) and math.isnan(pair.p_value)
    assert not pair.significant
    doc = json.loads(res.to_json())
    ab = next(p for p in doc["pairs"] if (p["prefix_model"], p["model"]) == ("a", "b"))
    assert ab["ci_low"] is None and ab["p_value"] is None and ab["p_adjusted"] is None
    other = res.fit.pair("b", "a")
    assert other is not None and math.isfinite(other.p_value) and math.isfinite(other.p_adjusted)


def test_pairs_need_twenty_paired_episodes_by_default() -> None:
    """19 episodes: nothing reported; 20: every off-diagonal pair reported."""
    rng = np.random.default_rng(1)
    few = switch_matrix(ScoreTable.from_rows(_null_rows(rng, 2, 1, 19)), resamples=200, seed=0)
    enough = switch_matrix(ScoreTable.from_rows(_null_rows(rng, 2, 1, 20)), resamples=200, seed=0)
    assert few.min_n == 20 and not any(p.observed for p in few.fit.pairs)
    assert all(p.observed for p in enough.fit.pairs)


def test_scripts_are_resampled_as_a_level_when_there_are_several() -> None:
    """Episodes of a script share a script-level δ; 6 scripts × 10 runs, true mean Δ = 0, 400 replicates.

    Resampling episodes as if independent ignores the script effect and covers 0 far less
    often than 95%; resampling scripts then runs within them restores most of it (six
    clusters are few: bootstrap intervals run a little short there).
    """
    rng = np.random.default_rng(3)
    reps, scripts, runs = 400, 6, 10
    script_effect = rng.normal(0, 0.12, (reps, scripts))  # scripts drawn from a population with Δ = 0
    delta = np.repeat(script_effect, runs, axis=1) + rng.normal(0, 0.3, (reps, scripts * runs))
    clusters = np.repeat(np.arange(scripts), runs)
    flat = bca_means(delta, resamples=1000, rng=1)
    clustered = cluster_bca_means(delta, clusters, resamples=1000, rng=1)
    cover_flat = np.mean((flat.ci_low <= 0) & (flat.ci_high >= 0))
    cover_cluster = np.mean((clustered.ci_low <= 0) & (clustered.ci_high >= 0))
    assert cover_cluster >= 0.85 and cover_cluster - cover_flat >= 0.10, (cover_flat, cover_cluster)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_scripts_whose_effects_differ_keep_the_test_near_its_level(seed: int) -> None:
    """6 scripts × 10 runs whose script-level effects differ around a true mean Δ = 0 (SD 0.3,
    as large as the episodes' noise), 1,000 replicates: raw p < 0.05 in at most 8 % of them
    (5 % nominal, 3 binomial SDs of 0.7 pp, and ~1 pp for the bootstrap's SE, which sees
    (G − 1)/G of the scripts' spread). The t has Satterthwaite's degrees of freedom, near the
    scripts' G − 1 here: measured 5.2-6.9 % over these seeds; on the episodes' n − 1 it rejected
    in 8.8-11.3 % (3 scripts: 8.4-9.3 % against 17-18 %)."""
    rng = np.random.default_rng(seed)
    reps, scripts, runs = 1000, 6, 10
    script_effect = rng.normal(0, 0.3, (reps, scripts))
    delta = np.repeat(script_effect, runs, axis=1) + rng.normal(0, 0.3, (reps, scripts * runs))
    res = cluster_bca_means(delta, np.repeat(np.arange(scripts), runs), resamples=1000, rng=seed)
    rejected = float(np.mean(res.p_value < 0.05))
    assert rejected <= 0.08, rejected


def test_cluster_bootstrap_of_one_episode_per_script_is_the_plain_bootstrap_distribution() -> None:
    """With one episode per script, the two-stage draw is an ordinary resample: same SE and interval (±MC)."""
    x = np.random.default_rng(5).exponential(1.0, (1, 80))
    flat = bca_means(x, resamples=4000, rng=2)
    clustered = cluster_bca_means(x, np.arange(80), resamples=4000, rng=3)
    assert (
        clustered.se[0] == np.float64(clustered.se[0])
        and abs(clustered.se[0] - flat.se[0]) < 0.1 * flat.se[0]
    )
    assert (
        abs(clustered.ci_low[0] - flat.ci_low[0]) < 0.05
        and abs(clustered.ci_high[0] - flat.ci_high[0]) < 0.05
    )
    assert abs(clustered.acceleration[0] - flat.acceleration[0]) < 1e-9  # same jackknife


def test_benjamini_hochberg_keeps_false_pairs_rare_under_the_null() -> None:
    """K = 5 (20 pairs), no handoff effect, 80 matrices: ≥ 1 false significant pair in ≤ 12% of them.

    Raw p < 0.05 gives about 1 − 0.95^20 ≈ 64% (measured 61%); under the complete null BH's
    FDR is its family-wise rate, 5% (measured 6% over 150 matrices).
    """
    rng = np.random.default_rng(7)
    any_false = any_raw = 0
    for i in range(80):
        res = switch_matrix(ScoreTable.from_rows(_null_rows(rng, 5, 1, 40)), resamples=400, seed=i)
        any_false += any(p.significant for p in res.fit.pairs)
        any_raw += any(p.p_value < 0.05 for p in res.fit.pairs)
        assert all(p.p_adjusted >= p.p_value for p in res.fit.pairs if math.isfinite(p.p_value))
    assert any_false / 80 <= 0.12 and any_raw / 80 >= 0.3, (any_false, any_raw)


def test_a_planted_pair_is_still_found_under_bh() -> None:
    """One pair planted far below its baseline among 20: significant after adjustment, adjusted ≥ raw p."""
    rng = np.random.default_rng(8)
    rows = _null_rows(rng, 5, 1, 100)
    rows = [
        (e, a, b, float(rng.random() < 0.1)) if (a, b) == ("m0", "m1") else (e, a, b, s)
        for e, a, b, s in rows
    ]
    res = switch_matrix(ScoreTable.from_rows(rows), resamples=1000, seed=0)
    pair = res.fit.pair("m0", "m1")
    assert pair is not None and pair.significant and pair.p_adjusted >= pair.p_value
    assert sum(p.significant for p in res.fit.pairs) <= 2
