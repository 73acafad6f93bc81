"""The report example on docs/getting-started/demo.md runs and writes a report naming the risky model."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from tests.docs.snippets import claimed

PAGE = "docs/getting-started/demo.md"


def test_demo_page_report_example_names_the_planted_risky_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example writes sim-report.html and prints the planted risky prefix (ember) as most harmful."""
    (block,) = claimed(PAGE, "tests/report/test_docs_example.py")
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block.code, block.id, "exec"), {"__name__": "docs_example"})
    assert out.getvalue().strip() == "ember"
    assert (tmp_path / "sim-report.html").read_text(encoding="utf-8").startswith("<!doctype html>")
