"""Pins the package surface: light import, public names, version, CLI entry."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

import handoffmon
from handoffmon.cli import main

HEAVY = ("litellm", "scipy", "starlette", "uvicorn", "aiohttp", "redis", "fastapi", "opentelemetry.sdk")


def test_import_is_light() -> None:
    """`import handoffmon` in a fresh interpreter pulls in none of the heavy stacks."""
    code = f"import sys, handoffmon; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_public_names_pinned() -> None:
    """__all__ is the contract; changing it is a deliberate act."""
    assert sorted(handoffmon.__all__) == [
        "ConfigError",
        "HandoffmonConfig",
        "HandoffmonError",
        "Monitor",
        "Runtime",
        "__version__",
        "build_runtime",
        "load_config",
        "shared_runtime",
        "wrap",
    ]


def test_version_flag() -> None:
    """`handoffmon --version` prints the package version."""
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert handoffmon.__version__ in result.output
