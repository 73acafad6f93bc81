"""The runtime docs stay true: the wrap quickstart runs, the proxy snippet is the example's, keys exist."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import yaml

from handoffmon.config import HandoffmonConfig
from tests.docs.snippets import claimed

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "docs" / "guides" / "wrap-router.md",
    ROOT / "docs" / "guides" / "litellm-proxy.md",
    ROOT / "docs" / "guides" / "serve.md",
    ROOT / "docs" / "concepts" / "runtime.md",
]


def _blocks(page: Path, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)


def test_wrap_quickstart_shows_the_turn_in_the_registry_and_on_the_port() -> None:
    """The runnable snippet of wrap-router.md prints the REGISTRY sample and finds it on metrics_port."""
    (block,) = claimed("docs/guides/wrap-router.md", "tests/runtime/test_docs.py")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block.code, block.id, "exec"), {})
    assert out.getvalue().split() == ["1.0", "True"]


def test_proxy_guide_shows_the_shipped_example_config() -> None:
    """The litellm-proxy.md config.yaml lines are exactly those of examples/litellm_proxy_callback."""
    (snippet,) = [b for b in _blocks(PAGES[1], "yaml") if "callbacks" in b]
    example = yaml.safe_load((ROOT / "examples" / "litellm_proxy_callback" / "config.yaml").read_text())
    documented = yaml.safe_load(snippet)
    assert documented == {k: example[k] for k in ("litellm_settings", "general_settings")}
    assert "# the one line handoffmon needs" in snippet


def test_every_config_key_the_pages_name_exists() -> None:
    """`section.key` names in the pages are real config keys (a renamed key fails here)."""
    sections = set(HandoffmonConfig.model_fields)
    named = {
        m.group(1)
        for page in PAGES
        for m in re.finditer(r"`([a-z_]+\.[a-z_]+)`", page.read_text(encoding="utf-8"))
        if m.group(1).split(".")[0] in sections
    }
    assert {"telemetry.metrics_port", "telemetry.metrics_token", "store.backoff_s"} <= named
    for key in named:
        section, field = key.split(".")
        if key == "proxy.metrics_token":  # named as the key that moved
            continue
        model = HandoffmonConfig.model_fields[section].annotation
        assert field in model.model_fields, key  # type: ignore[union-attr]
