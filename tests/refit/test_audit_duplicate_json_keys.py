"""A refit JSON with a key given twice is refused (audit 2026-12-07).

``json.loads`` keeps the last of two equal keys: a hand-edited refit.json with a second, pasted
``"rules"`` object was reported, exported to shapes and loaded as a routing table from the
second only, with exit 0. ``RefitResult.from_json`` now stops naming the file and the key, as
the shapes and eval readers do (``errors.unique_object``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from handoffmon.cli import main
from handoffmon.errors import InputError
from handoffmon.refit.result import RefitResult
from tests.refit.golden_cases import load


def _refit_file(path: Path, *, duplicate: str | None = None) -> str:
    """The simulator's K = 8 refit written to ``path``; with ``duplicate``, that top-level key is
    given a second time before the real one (an empty copy, as a careless paste would)."""
    text = json.dumps(load("sim_k8_clean"), indent=2)
    if duplicate is not None:
        marker = f'\n  "{duplicate}": '
        assert text.count(marker) == 1
        text = text.replace(marker, f'\n  "{duplicate}": {{}},{marker}', 1)
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_from_json_refuses_a_key_given_twice_naming_source_and_key(tmp_path: Path) -> None:
    whole = Path(_refit_file(tmp_path / "ok.json")).read_text(encoding="utf-8")
    assert RefitResult.from_json(whole, source="ok.json").rules  # the document itself reads
    text = Path(_refit_file(tmp_path / "refit.json", duplicate="rules")).read_text(encoding="utf-8")
    with pytest.raises(InputError, match=r"^refit\.json: key 'rules' given twice in one object: keep one$"):
        RefitResult.from_json(text, source="refit.json")
    nested = whole.replace('"mu": ', '"mu": 0.5, "mu": ', 1)
    with pytest.raises(InputError, match=r"^in\.json: key 'mu' given twice"):
        RefitResult.from_json(nested, source="in.json")


def test_report_and_shapes_export_refuse_a_refit_json_with_a_key_given_twice(tmp_path: Path) -> None:
    refit = _refit_file(tmp_path / "refit.json", duplicate="rules")
    out = tmp_path / "report.html"
    res = CliRunner().invoke(main, ["report", refit, "--out", str(out)])
    assert res.exit_code == 1, res.output
    assert f"{refit}: key 'rules' given twice" in res.output, res.output
    assert not out.exists()
    shapes = tmp_path / "shapes.json"
    res = CliRunner().invoke(main, ["shapes", "export", "--source", refit, "--out", str(shapes)])
    assert res.exit_code == 1, res.output
    assert f"{refit}: key 'rules' given twice" in res.output, res.output
    assert not shapes.exists()
