"""`handoffmon stats switch-matrix`: scores.csv → matrix.json, seeded and reproducible."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from handoffmon.cli import main


def _scores_csv(path: Path, k: int = 3, e: int = 60) -> None:
    rng = np.random.default_rng(0)
    lines = ["episode,prefix_model,suffix_model,score"]
    for a in range(k):
        for b in range(k):
            for i in range(e):
                lines.append(f"e{i},m{a},m{b},{int(rng.random() < 0.5 + 0.1 * (a - b))}")
    path.write_text("\n".join(lines) + "\n")


def test_switch_matrix_command_writes_cells_pairs_models(tmp_path: Path) -> None:
    """matrix.json has K² cells, K(K−1) pairs with BCa bounds, per-model π/σ; same seed → same file."""
    scores = tmp_path / "scores.csv"
    _scores_csv(scores)
    outs = [tmp_path / "a.json", tmp_path / "b.json"]
    for out in outs:
        res = CliRunner().invoke(
            main,
            [
                "stats",
                "switch-matrix",
                "--scores",
                str(scores),
                "--out",
                str(out),
                "--resamples",
                "300",
                "--seed",
                "4",
            ],
        )
        assert res.exit_code == 0, res.output
    a, b = (json.loads(o.read_text()) for o in outs)
    a.pop("created_at"), b.pop("created_at")
    assert a == b
    assert len(a["cells"]) == 9 and len(a["pairs"]) == 6 and set(a["models"]) == {"m0", "m1", "m2"}
    assert a["resamples"] == 300 and a["seed"] == 4
    assert all(p["ci_low"] <= p["delta"] <= p["ci_high"] for p in a["pairs"])


def test_switch_matrix_bad_scores_exit_1(tmp_path: Path) -> None:
    """A scores file without the score column fails with a clear message."""
    bad = tmp_path / "s.csv"
    bad.write_text("episode,prefix_model,suffix_model\ne1,a,b\n")
    res = CliRunner().invoke(
        main, ["stats", "switch-matrix", "--scores", str(bad), "--out", str(tmp_path / "o.json")]
    )
    assert res.exit_code == 1 and "missing column(s) score" in res.output


def test_switch_matrix_header_only_scores_exit_4(tmp_path: Path) -> None:
    """A scores file with its header and no rows is NO_DATA (exit 4), not a malformed file (1)."""
    empty = tmp_path / "s.csv"
    empty.write_text("episode,prefix_model,suffix_model,score\n")
    out = tmp_path / "o.json"
    res = CliRunner().invoke(main, ["stats", "switch-matrix", "--scores", str(empty), "--out", str(out)])
    assert res.exit_code == 4 and f"error: {empty}: no rows" in res.stderr and not out.exists()
