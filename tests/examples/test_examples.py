"""The shipped examples run offline and print what handoffmon recorded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def _run(script: Path, timeout_s: float = 120) -> str:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(ROOT)}
    env.pop("HANDOFFMON_CONFIG", None)
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=timeout_s, env=env, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_wrap_router_example_reports_fallback_handoffs() -> None:
    """wrap_router.py: turns 3-4 are served by the fallback (model-b); handoffs at depth 3 and 5."""
    out = _run(EXAMPLES / "wrap_router.py")
    lines = [line for line in out.splitlines() if line.startswith("depth")]
    assert len(lines) == 5
    assert "author model-b  prefix model-a  handoff True  deployment dep-b  fallbacks 1" in lines[2]
    assert (
        "author model-a  prefix model-b  handoff True  deployment dep-a  fallbacks 0  streamed True"
        in lines[4]
    )
    assert "turns counted: 5, handoff turns: 2, dropped: 0" in out


def test_wrap_openai_client_example_reports_authors_from_headers() -> None:
    """wrap_openai_client.py: five turns, the third by model b after a (a handoff), all chain-attributed."""
    out = _run(EXAMPLES / "wrap_openai_client.py")
    assert "recorded 5 turns; attributions of earlier messages: {'chain': 10}" in out
    assert "author b after a     depth 3-4  handoff true: 1" in out
    assert "author a after b     depth 3-4  handoff true: 1" in out


@pytest.mark.slow
@pytest.mark.integration
def test_litellm_proxy_example_runs() -> None:
    """litellm_proxy_callback/run.py prints 4 turns (real proxy; tests/integrations covers it by default)."""
    out = _run(EXAMPLES / "litellm_proxy_callback" / "run.py", timeout_s=180)
    assert "recorded by the proxy: 4 turns" in out
    assert "author model-b after model-c depth 2    handoff true: 1" in out
