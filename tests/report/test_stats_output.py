"""The one-line summary `handoffmon stats switch-matrix` prints (kept with the report's other outputs)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from click.testing import CliRunner

from handoffmon.cli import main


def _scores(path: Path, models: list[str], episodes: int) -> None:
    rng = random.Random(1)
    rows = ["episode,prefix_model,suffix_model,score"]
    rows += [f"e{e},{a},{b},{rng.random():.3f}" for e in range(episodes) for a in models for b in models]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")


def test_a_saturated_two_model_matrix_does_not_print_r2_one(tmp_path: Path) -> None:
    """2 models, 2 pairs, pure noise scores: the raw R² is 1.000 (as many parameters as pairs);
    the summary prints the adjusted R² as `handoffmon refit` does, here not estimable."""
    scores, out = tmp_path / "s.csv", tmp_path / "m.json"
    _scores(scores, ["a", "b"], 30)
    res = CliRunner().invoke(
        main, ["stats", "switch-matrix", "--scores", str(scores), "--out", str(out), "--seed", "1",
               "--resamples", "200"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["r2"] > 0.999 and doc["r2_adjusted"] is None  # the degenerate case this pins
    assert "adjusted r2=n/a (too few pairs)" in res.output and "r2=1.000" not in res.output
    observed = sum(p["observed"] for p in doc["pairs"])
    assert f"/{observed} observed pairs significant" in res.output
