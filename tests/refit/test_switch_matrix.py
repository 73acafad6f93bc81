"""Offline switch matrix: paired Δ, cell means, decomposition, missing episodes, JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest

from handoffmon.refit.bootstrap import bca_means
from handoffmon.refit.result import SwitchMatrixResult
from handoffmon.refit.switch_matrix import ScoreTable, switch_matrix


def _scores(k: int = 5, e: int = 150, seed: int = 0, noise: float = 0.05):  # type: ignore[no-untyped-def]
    """Continuous episode scores with an episode effect shared by all cells and additive Δ."""
    rng = np.random.default_rng(seed)
    pi = rng.normal(0, 0.06, k)
    pi -= pi.mean()
    sigma = rng.normal(0, 0.06, k)
    sigma -= sigma.mean()
    episode = rng.normal(0.6, 0.15, e)
    rows = []
    for a in range(k):
        for b in range(k):
            shift = 0.0 if a == b else -0.02 + pi[a] + sigma[b]
            s = episode + shift + rng.normal(0, noise, e)
            rows += [(f"e{i}", f"m{a}", f"m{b}", float(s[i])) for i in range(e)]
    return rows, pi, sigma


def test_recovers_planted_terms_and_pairs_are_paired() -> None:
    """π̂, σ̂ correlate ≥ 0.95 with the planted ones; pairing cancels the large episode effect."""
    rows, pi, sigma = _scores()
    res = switch_matrix(ScoreTable.from_rows(rows), resamples=500, seed=1)
    models = [f"m{i}" for i in range(5)]
    pi_hat = [res.fit.models[m].prefix_influence for m in models]
    sigma_hat = [res.fit.models[m].suffix_susceptibility for m in models]
    assert np.corrcoef(pi_hat, pi)[0, 1] >= 0.95
    assert np.corrcoef(sigma_hat, sigma)[0, 1] >= 0.95
    widths = [p.ci_high - p.ci_low for p in res.fit.pairs]
    assert max(widths) < 0.05  # unpaired, the episode SD 0.15 would give widths ≈ 0.07


def test_pair_interval_is_the_bca_of_per_episode_differences() -> None:
    """One pair's Δ and interval are exactly bca_means over δ(e) for that pair."""
    rows = [("e1", "a", "b", 1.0), ("e2", "a", "b", 0.0), ("e3", "a", "b", 1.0), ("e4", "a", "b", 1.0)]
    rows += [("e1", "b", "b", 0.0), ("e2", "b", "b", 0.0), ("e3", "b", "b", 1.0), ("e4", "b", "b", 0.0)]
    rows += [(f"e{i}", "a", "a", 1.0) for i in range(1, 5)] + [(f"e{i}", "b", "a", 0.5) for i in range(1, 5)]
    res = switch_matrix(ScoreTable.from_rows(rows), resamples=300, seed=2)
    pair = res.fit.pair("a", "b")
    assert pair is not None and pair.n == 4 and pair.delta == pytest.approx(0.5)
    cells = {(c.prefix_model, c.model): c for c in res.cells}
    assert cells[("a", "b")].mean == pytest.approx(0.75) and cells[("b", "b")].mean == pytest.approx(0.25)
    # reproduce: cells bootstrapped first (one group), then deltas (one group) from the same generator
    rng = np.random.default_rng(2)
    bca_means(np.zeros((4, 4)), resamples=300, rng=rng)
    ref = bca_means(np.array([[1.0, 0.0, 0.0, 1.0]]), resamples=300, rng=rng)
    assert (pair.ci_low, pair.ci_high) == pytest.approx((ref.ci_low[0], ref.ci_high[0]))


def test_missing_episodes_drop_only_from_the_affected_pair() -> None:
    """An episode absent from one cell reduces that pair's n; other pairs keep all episodes."""
    rows, _, _ = _scores(k=3, e=40, seed=3)
    rows = [r for r in rows if not (r[0] in ("e0", "e1") and r[1:3] == ("m0", "m1"))]
    res = switch_matrix(ScoreTable.from_rows(rows), resamples=200, seed=0)
    assert res.fit.pair("m0", "m1").n == 38  # type: ignore[union-attr]
    assert res.fit.pair("m1", "m0").n == 40  # type: ignore[union-attr]
    assert {c.n for c in res.cells} == {38, 40}


def test_matrix_json_has_pairs_models_and_cells_and_round_trips() -> None:
    """matrix.json: top-level mu, r2, models, pairs (like a rule fit) plus cells; versioned."""
    rows, _, _ = _scores(k=3, e=30, seed=4)
    res = switch_matrix(ScoreTable.from_rows(rows), resamples=200, seed=0, now=5.0)
    doc = json.loads(res.to_json())
    assert doc["schema"] == "handoffmon.switch_matrix" and doc["version"] == 2
    assert {"mu", "r2", "models", "pairs", "cells", "resamples", "seed"} <= doc.keys()
    assert len(doc["cells"]) == 9 and len(doc["pairs"]) == 6
    back = SwitchMatrixResult.from_dict(doc)
    assert back.to_json() == res.to_json()
