"""The Python example in the README's demo section runs and writes a report naming the risky model."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_demo_section_python_example_runs(tmp_path: Path) -> None:
    """The example writes sim-report.html and prints the planted risky prefix (ember) as most harmful."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("<!-- section:demo -->")[1].split("<!-- /section:demo -->")[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(blocks[0], "README.md:demo", "exec"), {"__name__": "readme_example"})
    finally:
        os.chdir(cwd)
    assert out.getvalue().strip() == "ember"
    assert (tmp_path / "sim-report.html").read_text(encoding="utf-8").startswith("<!doctype html>")
