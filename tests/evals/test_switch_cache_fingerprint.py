"""eval switch-matrix reuses cached prefixes and cells only under the fingerprint they were made with."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from handoffmon.cli import main

SCRIPT = {
    "id": "fpm",
    "runs": 2,
    "rules": [{"name": "no_commas", "check": "no_commas"}],
    "turns": [{"user": q, "checkpoint": True} for q in ("Where is my order?", "And now?", "And then?")],
}


def _cache(tmp_path: Path) -> dict[str, str]:
    """Every cache file → its text."""
    root = tmp_path / "cache"
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*.json"))}


def _matrix(tmp_path: Path, *args: str, router: str = "sim:3") -> tuple[int, str]:
    script = tmp_path / "fpm.yaml"
    script.write_text(yaml.safe_dump(SCRIPT), encoding="utf-8")
    res = CliRunner().invoke(
        main,
        [
            *("eval", "switch-matrix", str(script), "--router", router, "--models", "sim-00,sim-01"),
            *("--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "m.json"), "--min-n", "2"),
            *("--score", "mean", "--no-progress", *args),
        ],
    )
    return res.exit_code, res.output


def test_a_matrix_rerun_with_another_seed_is_refused_then_discarded_on_request(tmp_path: Path) -> None:
    """--seed 7 over a seed-0 cache: exit 1 naming the seed change; --discard-stale regenerates it all."""
    code, out = _matrix(tmp_path)
    assert code == 0 and "prefixes generated 4, reused 4; cells generated 8, cached 0" in out, out
    before = _cache(tmp_path)
    assert len(before) == 12
    code, out = _matrix(tmp_path)
    assert code == 0 and "prefixes generated 0, reused 0; cells generated 0, cached 8" in out, out
    (tmp_path / "m.json").unlink()
    code, out = _matrix(tmp_path, "--seed", "7")
    assert code == 1 and "12 cached prefix(es) or cell(s)" in out and "seed 0 -> 7" in out, out
    assert "--discard-stale" in out and "new --cache" in out, out
    assert _cache(tmp_path) == before and not (tmp_path / "m.json").exists()
    code, out = _matrix(tmp_path, "--seed", "7", "--discard-stale")
    assert code == 0, out
    assert (
        "prefixes generated 4, reused 4; cells generated 8, cached 0 (12 stale cache entries discarded)"
        in out
    )
    after = _cache(tmp_path)
    assert set(after) == set(before) and all(
        json.loads(t)["fingerprint"]["seed"] == 7 for t in after.values()
    )
    code, out = _matrix(tmp_path, "--seed", "7")
    assert code == 0 and "cells generated 0, cached 8" in out, out


def test_another_deployment_or_an_unfingerprinted_cache_is_not_reused(tmp_path: Path) -> None:
    """The same model names served by another simulator fleet, or a cache file from before fingerprints."""
    assert _matrix(tmp_path)[0] == 0
    code, out = _matrix(tmp_path, router="sim:2")
    assert code == 1 and "deployment 'sim:3 " in out and "seed" not in out.split("other settings")[1], out
    prefix = next(p for p in sorted((tmp_path / "cache" / "prefix").rglob("*.json")))
    prefix.write_text(json.dumps(json.loads(prefix.read_text())["value"]), encoding="utf-8")  # the old format
    code, out = _matrix(tmp_path)
    assert code == 1 and "1 cached prefix(es) or cell(s)" in out and "without a fingerprint" in out, out
    code, out = _matrix(tmp_path, "--discard-stale")
    assert code == 0 and "cells generated 0, cached 8 (1 stale cache entries discarded)" in out, out


def test_a_corrupt_cache_entry_is_named_then_discarded_on_request(tmp_path: Path) -> None:
    """A truncated cache file (a copy cut short, a full disk) stops the rerun naming the file (it used
    to print only the JSON parser's message); --discard-stale deletes and regenerates it."""
    assert _matrix(tmp_path)[0] == 0
    (tmp_path / "m.json").unlink()
    cell = next(p for p in sorted((tmp_path / "cache" / "cell").rglob("*.json")))
    cell.write_text(cell.read_text()[:40], encoding="utf-8")
    code, out = _matrix(tmp_path)
    assert code == 1 and f"error: {cell}: unreadable cache entry" in out, out
    assert "--discard-stale" in out and not (tmp_path / "m.json").exists(), out
    code, out = _matrix(tmp_path, "--discard-stale")
    assert code == 0 and "cells generated 1, cached 7 (1 stale cache entries discarded)" in out, out
    assert json.loads(cell.read_text())["fingerprint"]["seed"] == 0
