"""The layering contract in pyproject ([tool.importlinter]) holds, and the package has no import cycle."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _contracts() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def test_layers_cover_every_subpackage() -> None:
    """Each subpackage and top-level module of handoffmon sits in a layer (nothing escapes the contract)."""
    (layers,) = [c["layers"] for c in _contracts() if c["type"] == "layers"]
    named = {part.strip() for layer in layers for part in str(layer).split("|")}  # type: ignore[attr-defined]
    package = ROOT / "handoffmon"
    modules = {
        f"handoffmon.{p.name}" for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()
    }
    modules |= {
        f"handoffmon.{p.stem}" for p in package.glob("*.py") if p.stem not in ("__init__", "__main__")
    }
    assert modules <= named, sorted(modules - named)


def test_import_linter_contracts_are_kept() -> None:
    """`lint-imports` (layers, and no LiteLLM/server stack in the core) reports every contract kept."""
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if lint is None:
        pytest.skip("import-linter not installed (dev extra)")
    out = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert f"{len(_contracts())} kept, 0 broken" in out.stdout


def test_no_import_cycles() -> None:
    """No module of handoffmon imports itself back through others (checkers and monitor/refit had)."""
    import grimp

    graph = grimp.build_graph("handoffmon", include_external_packages=False)
    cycles = [
        (a, b)
        for a in graph.modules
        for b in graph.find_modules_directly_imported_by(a)
        if a != b
        and not (a.startswith(b + ".") or b.startswith(a + "."))
        and graph.chain_exists(importer=b, imported=a)
    ]
    assert cycles == []
