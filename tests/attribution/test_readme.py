"""Pins that the README's attribution example runs and its assertion holds."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_attribution_example_runs() -> None:
    """The python block of the README `attribution` section executes without error."""
    text = README.read_text(encoding="utf-8")
    section = text.split("<!-- section:attribution -->", 1)[1].split("<!-- /section:attribution -->", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1
    exec(compile(blocks[0], "README.md#attribution", "exec"), {})
