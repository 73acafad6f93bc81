"""Pressure scripts: 80/20 Markov fit recovers a planted chain; log loss/MSE equal a direct computation."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import numpy as np
import pytest

from handoffmon.evals.models import Reply
from handoffmon.evals.pressure import fit_all, fit_pressure, split_runs
from handoffmon.evals.results import build_result
from handoffmon.evals.runner import Runner, RunSettings
from handoffmon.evals.script import load_script
from handoffmon.evals.store import ResultStore

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "evals" / "pressure_think_again.yaml"
P_TF, P_FT, A1 = 0.1, 0.3, 0.8


def _chains(n_runs: int, turns: int, seed: int) -> dict[int, list[bool]]:
    rng = np.random.default_rng(seed)
    out = {}
    for r in range(n_runs):
        s = [bool(rng.random() < A1)]
        for _ in range(turns - 1):
            s.append(bool(rng.random() < ((1 - P_TF) if s[-1] else P_FT)))
        out[r] = s
    return out


def test_planted_chain_is_recovered_on_the_training_runs() -> None:
    """1,000 planted runs × 10 turns: p_TF, p_FT and stationary accuracy inside their intervals."""
    fit = fit_pressure("q", "m", _chains(1000, 10, seed=4))
    assert (fit.n_train, fit.n_val) == (800, 200)
    assert fit.p_tf_ci[0] <= P_TF <= fit.p_tf_ci[1]
    assert fit.p_ft_ci[0] <= P_FT <= fit.p_ft_ci[1]
    stationary = P_FT / (P_TF + P_FT)
    assert fit.stationary_ci[0] <= stationary <= fit.stationary_ci[1]
    assert fit.stationary == pytest.approx(fit.p_ft / (fit.p_tf + fit.p_ft))
    assert fit.stationary_change == pytest.approx(fit.stationary - fit.first_turn_accuracy)


def test_simulated_curve_and_its_losses_equal_a_direct_computation() -> None:
    """Curve = a(i+1) = a(i)(1−p_TF) + (1−a(i))p_FT from the validation turn-1 accuracy; losses per check."""
    runs = _chains(300, 8, seed=9)
    fit = fit_pressure("q", "m", runs, seed=2)
    _, val = split_runs(list(runs), 0.8, 2)
    y = np.array([runs[r] for r in val], dtype=float)
    a = [y[:, 0].mean()]
    for _ in range(7):
        a.append(a[-1] * (1 - fit.p_tf) + (1 - a[-1]) * fit.p_ft)
    assert fit.simulated == pytest.approx(a, abs=1e-12)
    assert fit.observed == pytest.approx(list(y.mean(axis=0)), abs=1e-12)
    f = np.array(a)[None, :]
    log_loss = -np.mean(y * np.log(f) + (1 - y) * np.log(1 - f))
    assert fit.log_loss == pytest.approx(log_loss, abs=1e-12)
    assert fit.mse == pytest.approx(np.mean((y - f) ** 2), abs=1e-12)


def test_split_is_seeded_disjoint_and_eighty_twenty() -> None:
    """The split is reproducible per seed, disjoint, covers all runs, and keeps ≥ 1 validation run."""
    train, val = split_runs(range(20), 0.8, 5)
    assert (len(train), len(val)) == (16, 4) and not set(train) & set(val)
    assert sorted(train + val) == list(range(20))
    assert split_runs(range(20), 0.8, 5) == (train, val) != split_runs(range(20), 0.8, 6)
    assert split_runs([0, 1], 0.8, 0)[1] != []


class ChainModel:
    """Answers the pressure question correctly (C) or not (B) following the planted chain per run."""

    def __init__(self) -> None:
        self.state: dict[int, bool] = {}

    async def __call__(self, model: str, messages: object, *, seed: int) -> Reply:
        rng = np.random.default_rng([seed, len(messages)])  # type: ignore[arg-type]
        prev = self.state.get(seed)
        ok = bool(rng.random() < (A1 if prev is None else (1 - P_TF) if prev else P_FT))
        self.state[seed] = ok
        return Reply(f"Let me reconsider. <answer>{'C' if ok else 'B'}</answer>", model)


def test_pressure_script_end_to_end_through_the_runner(tmp_path: Path) -> None:
    """The example pressure script replayed 200 times: every turn scored, fit on 160 runs, scored on 40."""
    script = load_script(EXAMPLE)
    with ResultStore(tmp_path / "p.sqlite") as store:
        asyncio.run(Runner(ChainModel(), store, RunSettings(runs=200, concurrency=50)).run([script], "m"))
        rows = list(store.rows())
    assert len(rows) == 200 * 10 and {r.rule for r in rows} == {"correct"}
    (fit,) = fit_all(rows)
    assert (fit.script, fit.n_train, fit.n_val, len(fit.simulated)) == ("pressure-think-again", 160, 40, 10)
    for est, (lo, hi), planted in ((fit.p_tf, fit.p_tf_ci, P_TF), (fit.p_ft, fit.p_ft_ci, P_FT)):
        se = (hi - lo) / (2 * 1.96)
        assert abs(est - planted) <= 3 * se, (est, planted, se)  # one seeded sample: a 3-SE band
    assert math.isfinite(fit.log_loss) and 0 < fit.mse < 0.25
    result = build_result(rows, [script], "p.sqlite")
    (doc,) = json.loads(result.to_json())["pressure"]
    assert doc["n_train"] == 160 and doc["stationary"] == pytest.approx(fit.stationary)
    from handoffmon.evals.html import eval_report

    page = eval_report(result)
    assert "<th>stationary acc.</th>" in page and f"{100 * fit.stationary:.1f}%" in page
