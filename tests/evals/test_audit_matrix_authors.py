"""A switch matrix whose authors production never saw is listed, not left silent (audit 2026-12-07).

A matrix measured under other names than production's (another ``attribution.canonical_models``,
a renamed deployment) covers no production pair: every pair was listed as missing with exit 0,
no warning, nothing in ``unmatched``, and ``--strict`` exited 0 although it promises 4 when any
name has no match. Such authors are now ``unmatched.matrix_authors``, a note and a warning.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from handoffmon.cli import main
from handoffmon.evals.switch import CellScore, analyse
from tests.evals.test_eval_scope import _shapes


def _matrix(path: Path, authors: tuple[str, str]) -> str:
    cells = [
        CellScore(f"e{i}", a, b, float((i + len(a + b)) % 2), (a, b), 1)
        for i in range(6)
        for a in authors
        for b in authors
    ]
    path.write_text(analyse(cells, resamples=200, min_n=2).to_json(), encoding="utf-8")
    return str(path)


def test_matrix_authors_production_never_saw_are_listed_and_strict_exits_4(tmp_path: Path) -> None:
    pairs = ({"prefix_model": "birch", "model": "atlas", "turns": 60, "share": 0.6},)
    shapes = _shapes(tmp_path / "shapes.json", ["atlas", "birch"], pairs=pairs)
    renamed = _matrix(tmp_path / "renamed.json", ("atlas-v2", "birch"))
    out = tmp_path / "cmp.json"
    args = ["eval", "compare", "--shapes", shapes, renamed, "--out", str(out)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["unmatched"] == {"matrix_authors": ["atlas-v2"]}, doc["unmatched"]
    assert [(p["prefix_model"], p["model"]) for p in doc["missing_pairs"]] == [("birch", "atlas")]
    warned = [ln for ln in res.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warned) == 1 and "atlas-v2" in warned[0] and "switch-matrix authors" in warned[0], res.stderr
    strict = CliRunner().invoke(main, [*args, "--strict"])
    assert strict.exit_code == 4 and "--strict" in strict.stderr, strict.output
    matched = _matrix(tmp_path / "matched.json", ("atlas", "birch"))
    ok = CliRunner().invoke(main, ["eval", "compare", "--shapes", shapes, matched, "--strict"])
    assert ok.exit_code == 0 and "warning" not in ok.stderr, ok.output


def test_only_a_matrix_and_no_production_pair_is_nothing_compared_exit_4(tmp_path: Path) -> None:
    """RESULTS holding only a switch matrix are checked against production's handoff pairs; with
    none (no handoffs, or none at --min-share) nothing was compared, yet the report said
    'compared 0 cell(s) … missing: none' with exit 0, an all-clear from no data."""
    shapes = _shapes(tmp_path / "shapes.json", ["atlas", "birch"], pairs=())
    matrix = _matrix(tmp_path / "m.json", ("atlas", "birch"))
    out = tmp_path / "cmp.json"
    res = CliRunner().invoke(main, ["eval", "compare", "--shapes", shapes, matrix, "--out", str(out)])
    assert res.exit_code == 4, res.output
    assert "no eval run result" in res.stderr and "no handoff pair" in res.stderr, res.stderr
    assert not out.exists()
    rare = ({"prefix_model": "birch", "model": "atlas", "turns": 1, "share": 0.005},)
    shapes = _shapes(tmp_path / "rare.json", ["atlas", "birch"], pairs=rare)
    res = CliRunner().invoke(main, ["eval", "compare", "--shapes", shapes, matrix, "--out", str(out)])
    assert res.exit_code == 4 and "--min-share 0.01" in res.stderr, res.output
    res = CliRunner().invoke(main, ["eval", "compare", "--shapes", shapes, matrix, "--min-share", "0.001"])
    assert res.exit_code == 0 and "missing from the eval switch matrix:\n    none" in res.output, res.output
    assert "(eval's deepest checkpoint: none, no eval run result given)" in res.output, res.output  # was 0
