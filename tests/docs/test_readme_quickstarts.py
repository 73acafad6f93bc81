"""The README's wrap quickstart runs as a newcomer runs it and prints what the README says it prints.

The LiteLLM Proxy quickstart's config is the shipped example's (tests/integrations/test_litellm_proxy.py
runs that proxy and the README's curl line against it); the serve quickstart is run by
tests/proxy/test_readme.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.docs.snippets import ROOT, claimed, expected_output, shell_commands

PAGE = "README.md"
THIS = "tests/docs/test_readme_quickstarts.py"


def test_wrap_quickstart_prints_the_documented_series(tmp_path: Path) -> None:
    """The snippet, saved as app.py and run in a fresh process with no handoffmon settings, prints
    exactly the `handoffmon_turns_total` line written under it (the fallback's model, depth 1)."""
    (block,) = claimed(PAGE, THIS)
    expected = expected_output(block.code)
    assert expected and all(line.startswith("handoffmon_turns_total{") for line in expected)
    (tmp_path / "app.py").write_text(block.code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANDOFFMON_")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # no network for LiteLLM's cost map
    out = subprocess.run(
        [sys.executable, "app.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == expected


def test_litellm_proxy_quickstart_is_the_shipped_example_config() -> None:
    """The README's config.yaml lines are exactly those of examples/litellm_proxy_callback, which the
    proxy integration test runs."""
    (block,) = claimed(PAGE, THIS, "yaml")
    example = yaml.safe_load((ROOT / "examples" / "litellm_proxy_callback" / "config.yaml").read_text())
    assert yaml.safe_load(block.code) == {k: example[k] for k in ("litellm_settings", "general_settings")}
    (run,) = claimed(PAGE, "tests/integrations/test_litellm_proxy.py", "bash")
    (cd,) = [c.split()[1] for c in shell_commands(run.code) if c.startswith("cd ")]
    assert (ROOT / cd) == ROOT / "examples" / "litellm_proxy_callback"
    assert "HANDOFFMON_CONFIG=handoffmon.yaml litellm --config config.yaml" in run.code
    # the documented series is model-c's: the example's group `alpha` (dep-c), the group the
    # proxy test sends the README's completion to; another group would print another model
    assert 'model="alpha"' in run.code and 'model="model-c"' in run.code
    (alpha,) = [m for m in example["model_list"] if m["model_name"] == "alpha"]
    hm = yaml.safe_load((ROOT / "examples" / "litellm_proxy_callback" / "handoffmon.yaml").read_text())
    assert hm["attribution"]["canonical_models"][alpha["model_info"]["id"]] == "model-c"
