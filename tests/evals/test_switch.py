"""Switch matrix on the simulator: prefixes generated once, δ/BCa equal scipy, planted π/σ order recovered."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from handoffmon.evals.models import sim_target
from handoffmon.evals.runner import RunSettings
from handoffmon.evals.script import script_from_dict
from handoffmon.evals.switch import SwitchMatrixRun, analyse, episodes_of
from handoffmon.sim.fleet import DEFAULT_RULES, Fleet, SimModel

pytestmark = pytest.mark.slow  # a simulated switch matrix with paired BCa resamples (~30 s)

RULES = DEFAULT_RULES[:4]
NAMES = ("m-a", "m-b", "m-c")
PI = (-0.15, 0.0, 0.15)  # planted prefix influence (sums to zero)
SIGMA = (0.15, 0.0, -0.15)  # planted suffix susceptibility
RESAMPLES, SEED = 1000, 11
RULE_DEFS = [
    {"name": "reply_in_spanish", "check": "language", "params": {"languages": ["es"]}},
    {"name": "no_commas", "check": "no_commas"},
    {"name": "answer_tag", "check": "answer_tag"},
    {"name": "max_60_words", "check": "length", "params": {"unit": "words", "max": 60}},
]


def _fleet() -> Fleet:
    models = tuple(
        SimModel(
            name=n,
            group=n,
            base={r.name: 0.7 for r in RULES},
            p_tf=0.1,
            p_ft=0.25,
            influence=pi,
            susceptibility=sg,
        )
        for n, pi, sg in zip(NAMES, PI, SIGMA, strict=True)
    )
    return Fleet(models=models, rules=RULES, mu=-0.05, fallbacks={})


def _scripts(turns: int = 3, runs: tuple[int, ...] = (30, 6, 6, 6, 6, 6)) -> list:
    """One script per entry of ``runs``, run that many times: by default 60 episodes from six
    scripts (fewer than five make the script-level test weak, and ``eval switch-matrix`` warns),
    the first with the 30 runs a one-script analysis needs."""
    return [
        script_from_dict(
            {
                "id": f"task-{i}",
                "runs": n,
                "rules": RULE_DEFS,
                "turns": [{"user": f"question {i}.{k}"} for k in range(turns)],
            }
        )
        for i, n in enumerate(runs)
    ]


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> dict:
    target = sim_target(_fleet(), seed=3, fallbacks=False)
    cache = tmp_path_factory.mktemp("prefix-cache")
    episodes = episodes_of(_scripts())
    sm = SwitchMatrixRun(target.responder, NAMES, cache, score="mean", settings=RunSettings(concurrency=16))
    scores = asyncio.run(sm.run(episodes))
    return {
        "target": target,
        "cache": cache,
        "episodes": episodes,
        "run": sm,
        "scores": scores,
        "result": analyse(scores, resamples=RESAMPLES, seed=SEED),
    }


def test_every_prefix_is_generated_exactly_once_and_reused(matrix: dict) -> None:
    """60 episodes × 3 prefix models → 180 generations; the other 2 suffixes of each hit the cache."""
    sm, target = matrix["run"], matrix["target"]
    assert sm.stats.prefix_generated == 60 * 3
    assert sm.stats.prefix_hits == 60 * 3 * 2
    assert len(set(sm.stats.generated_keys)) == len(sm.stats.generated_keys) == 180
    # per model: 2 prefix turns × 60 episodes + 1 suffix turn × 60 episodes × 3 prefixes
    assert {m: target.provider.stats[f"reply:{m}"] for m in NAMES} == {m: 120 + 180 for m in NAMES}
    assert sm.calls.model_calls == 3 * 300
    # every turn of a cell was written by the model the cell names (no router fallback)
    for s in matrix["scores"]:
        assert s.authors == (s.prefix_model, s.prefix_model, s.suffix_model)


def test_rerun_on_the_same_cache_generates_nothing(matrix: dict) -> None:
    """A second matrix over the same cache directory reads every cell from disk; scores are identical."""
    again = SwitchMatrixRun(matrix["target"].responder, NAMES, matrix["cache"], score="mean")
    scores = asyncio.run(again.run(matrix["episodes"]))
    assert again.stats.prefix_generated == again.stats.suffix_generated == again.calls.model_calls == 0
    assert again.stats.suffix_hits == 60 * 9
    assert scores == matrix["scores"]


def _paired(scores: list, a: str, b: str) -> tuple[np.ndarray, np.ndarray]:
    cell = {s.episode: s.score for s in scores if (s.prefix_model, s.suffix_model) == (a, b)}
    base = {s.episode: s.score for s in scores if (s.prefix_model, s.suffix_model) == (b, b)}
    eps = sorted(cell)
    return np.array([cell[e] for e in eps]), np.array([base[e] for e in eps])


def test_delta_and_paired_bca_match_a_direct_scipy_computation(matrix: dict) -> None:
    """Δ(A→B) = mean_e[s(A→B) − s(B→B)] exactly; its interval equals scipy's paired BCa on the same resamples.

    With one script the episodes are resampled directly (no script level). The refit draws
    one resample matrix for the cell means, then one for the deltas; the
    direct computation skips the first draw and gives scipy the generator state of the second.
    """
    scores = [s for s in matrix["scores"] if s.episode.startswith("task-0#")]  # one script: flat bootstrap
    result = analyse(scores, resamples=RESAMPLES, seed=SEED)
    n = 30
    rng = np.random.default_rng(SEED)
    rng.integers(0, n, (RESAMPLES, n))  # the cell-mean draw
    checked = 0
    for p in result.fit.pairs:
        x, y = _paired(scores, p.prefix_model, p.model)
        assert len(x) == n and p.delta == pytest.approx(np.mean(x - y), abs=1e-12)
        ref = stats.bootstrap(
            (x, y),
            lambda u, v, axis: np.mean(u - v, axis=axis),
            paired=True,
            vectorized=True,
            method="BCa",
            n_resamples=RESAMPLES,
            random_state=copy.deepcopy(rng),
        )
        assert (p.ci_low, p.ci_high) == pytest.approx(tuple(ref.confidence_interval), abs=1e-9)
        checked += 1
    assert checked == 6


def test_planted_influence_and_susceptibility_order_is_recovered(matrix: dict) -> None:
    """π and σ from the decomposition rank the models as planted, within 0.08 of the planted values."""
    fit = matrix["result"].fit
    pi = [fit.models[m].prefix_influence for m in NAMES]
    sigma = [fit.models[m].suffix_susceptibility for m in NAMES]
    assert list(np.argsort(pi)) == list(np.argsort(PI))
    assert list(np.argsort(sigma)) == list(np.argsort(SIGMA))
    assert np.allclose(pi, PI, atol=0.08) and np.allclose(sigma, SIGMA, atol=0.08)
    worst = min((p for p in fit.pairs), key=lambda p: p.delta)
    assert (worst.prefix_model, worst.model) == ("m-a", "m-c") and worst.significant


def test_earlier_switch_hands_over_after_turn_t(tmp_path: Path, matrix: dict) -> None:
    """switch_at=1 on a 3-turn script: A writes turn 1, B writes turns 2-3; T outside 0..L-1 is rejected."""
    scripts = _scripts(turns=3, runs=(2,))
    sm = SwitchMatrixRun(matrix["target"].responder, NAMES[:2], tmp_path, switch_at=1, score="all")
    scores = asyncio.run(sm.run(episodes_of(scripts)))
    assert {(s.prefix_model, s.suffix_model, s.authors) for s in scores} == {
        (a, b, (a, b, b)) for a in NAMES[:2] for b in NAMES[:2]
    }
    assert all(s.score in (0.0, 1.0) for s in scores)
    assert sm.stats.prefix_generated == 2 * 2
    bad = SwitchMatrixRun(matrix["target"].responder, NAMES[:2], tmp_path, switch_at=3)
    with pytest.raises(ValueError, match=r"switch turn 3 outside 0\.\.2"):
        asyncio.run(bad.run(episodes_of(scripts)))


def test_matrix_html_report_draws_the_delta_heatmap(matrix: dict) -> None:
    """The report renderer's page for the matrix: one heatmap, every model, the worst cell's tooltip."""
    from handoffmon.evals.matrix_page import matrix_report

    page = matrix_report(matrix["result"])
    assert page.startswith("<!doctype html>") and page.count('class="chart heatmap"') == 1
    assert all(f">{m}</text>" in page for m in NAMES)
    assert "m-a → m-c: Δ" in page and "paired BCa" in page


def test_cli_switch_matrix_resumes_from_cache_and_matches_stats_switch_matrix(tmp_path: Path) -> None:
    """CLI on the simulator: a rerun generates nothing; its --scores CSV gives the same `stats` analysis."""
    import json

    from click.testing import CliRunner

    from handoffmon.cli import main

    script = Path(__file__).resolve().parents[2] / "examples" / "evals" / "sim_support.yaml"
    args = [
        "eval",
        "switch-matrix",
        str(script),
        "--router",
        "sim:2",
        "--models",
        "sim-00,sim-01",
        "--runs",
        "3",
        "--score",
        "mean",
        "--cache",
        str(tmp_path / "cache"),
        "--out",
        str(tmp_path / "m.json"),
        "--scores",
        str(tmp_path / "s.csv"),
        "--seed",
        "1",
        "--min-n",
        "2",
        "--no-progress",
    ]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    assert "prefixes generated 6, reused 6; cells generated 12, cached 0" in first.output
    again = CliRunner().invoke(main, args)
    assert "prefixes generated 0, reused 0; cells generated 0, cached 12" in again.output
    stats_out = CliRunner().invoke(
        main,
        [
            "stats",
            "switch-matrix",
            "--scores",
            str(tmp_path / "s.csv"),
            "--out",
            str(tmp_path / "st.json"),
            "--seed",
            "1",
            "--min-n",
            "2",
        ],
    )
    assert stats_out.exit_code == 0, stats_out.output
    ours = json.loads((tmp_path / "m.json").read_text())
    theirs = json.loads((tmp_path / "st.json").read_text())
    key = ("prefix_model", "model", "n", "delta", "ci_low", "ci_high")
    assert [[p[k] for k in key] for p in ours["pairs"]] == [[p[k] for k in key] for p in theirs["pairs"]]
    assert ours["n_episodes"] == 3 and len(ours["cells"]) == 4
