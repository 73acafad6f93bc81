"""A resumed eval on the simulator continues as the uninterrupted one would (audit 2026-12-07).

The simulator keeps each conversation's hidden state (the previous turn's intent and author)
in memory. A rerun rebuilds a conversation from the stored turns (``eval run --db``) or the
cached prefixes (``eval switch-matrix --cache``) in a new process, where that memory is
empty: the continuation was drawn as if no turn came before it (no prefix author, so no
handoff effect), and a resumed matrix measured another Δ (μ −0.20 with one significant pair
from scratch, +0.12 and none from the cached prefixes).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from handoffmon.cli import main
from handoffmon.evals.models import seeded_sim_provider_class
from handoffmon.sim.fleet import make_fleet


@pytest.fixture(scope="module")
def sim() -> Any:
    """The eval's seeded simulator class (imports litellm once) and a 3-model fleet without
    injected failures."""
    fleet = make_fleet(3)
    models = tuple(dataclasses.replace(m, rate_limit_rate=0.0, timeout_rate=0.0) for m in fleet.models)
    return seeded_sim_provider_class(), dataclasses.replace(fleet, models=models)


def _text(provider: Any, model: str, messages: list[dict[str, str]], seed: int) -> str:
    resp = provider.completion(model, messages, optional_params={"seed": seed})
    return str(resp.choices[0].message.content)


def _conversation(provider: Any, models: list[str], seed: int) -> list[dict[str, str]]:
    messages: list[dict[str, str]] = []
    for turn, model in enumerate(models, 1):
        messages.append({"role": "user", "content": f"question {turn}"})
        messages.append({"role": "assistant", "content": _text(provider, model, messages, seed)})
    return messages


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_fresh_provider_continues_a_stored_history_as_the_one_that_wrote_it(seed: int, sim: Any) -> None:
    """Turns 1-8 by sim-00 then sim-01 (a handoff), turn 9 by sim-01: a new provider given the
    stored history writes the same turn 9 as the provider that wrote the history."""
    cls, fleet = sim
    writer = cls(fleet, seed=5)
    authors = ["sim-00"] * 5 + ["sim-01"] * 3
    history = _conversation(writer, authors, seed)
    ask = [*history, {"role": "user", "content": "question 9"}]
    expected = _text(writer, "sim-01", ask, seed)
    resumed = cls(fleet, seed=5)  # a new process: nothing remembered
    assert _text(resumed, "sim-01", ask, seed) == expected


def test_a_history_the_simulator_did_not_write_still_gets_a_reply(sim: Any) -> None:
    """An assistant turn no fleet model would have written: the reply is drawn as a first turn."""
    cls, fleet = sim
    provider = cls(fleet, seed=5)
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "written by someone else"},
        {"role": "user", "content": "and now?"},
    ]
    assert _text(provider, "sim-00", messages, 0)
    depth, prev = provider.previous(provider._keyed(messages, {"optional_params": {"seed": 0}}))
    assert depth == 2 and prev is None


SCRIPT = {
    "id": "resume",
    "runs": 12,
    "rules": [
        {"name": "no_commas", "check": "no_commas"},
        {"name": "answer_tag", "check": "answer_tag"},
    ],
    "turns": [{"user": f"question {d}", "checkpoint": d >= 4} for d in range(1, 7)],
}


@pytest.mark.slow
def test_a_switch_matrix_from_cached_prefixes_scores_as_one_from_scratch(tmp_path: Path) -> None:
    """Cells deleted, prefixes kept (a run killed after its prefixes): the rerun's scores CSV is
    the one of the uninterrupted run."""
    script = tmp_path / "resume.yaml"
    script.write_text(yaml.safe_dump(SCRIPT), encoding="utf-8")

    def matrix(scores: str) -> None:
        res = CliRunner().invoke(
            main,
            [
                *("eval", "switch-matrix", str(script), "--router", "sim:3"),
                *("--models", "sim-00,sim-01", "--cache", str(tmp_path / "cache")),
                *("--out", str(tmp_path / "m.json"), "--scores", str(tmp_path / scores)),
                *("--min-n", "2", "--score", "mean", "--resamples", "100", "--no-progress"),
            ],
        )
        assert res.exit_code == 0, res.output

    matrix("first.csv")
    for cell in (tmp_path / "cache" / "cell").rglob("*.json"):
        cell.unlink()
    matrix("resumed.csv")
    first = (tmp_path / "first.csv").read_text()
    assert (tmp_path / "resumed.csv").read_text() == first
