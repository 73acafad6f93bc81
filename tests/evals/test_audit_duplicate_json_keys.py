"""A hand-edited shapes or eval JSON with a key given twice is refused (audit 2026-12-07).

``json.loads`` keeps the last of two equal keys: a shapes.json with a second, pasted ``"rules"``
list compared against the second only, and an eval.json with two ``"curves"`` likewise, with
exit 0. The reader now stops (exit 1) naming the file and the key, as YAML config files do.
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from handoffmon.cli import main
from tests.evals.test_eval_scope import _eval_doc, _shapes


def _dup(path: Path, key: str) -> None:
    """Give ``key`` (a top-level list) twice: the second copy empty, as a careless paste would."""
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace(f'"{key}": [', f'"{key}": [], "{key}": [', 1), encoding="utf-8")


def test_shapes_and_eval_json_with_a_key_given_twice_are_refused(tmp_path: Path) -> None:
    shapes = _shapes(tmp_path / "shapes.json", ["atlas"])
    ev = _eval_doc(tmp_path / "eval.json", {"atlas": ["no_commas"]})
    ok = CliRunner().invoke(main, ["eval", "compare", "--shapes", shapes, ev])
    assert ok.exit_code in (0, 3), ok.output
    _dup(Path(shapes), "rules")
    res = CliRunner().invoke(main, ["eval", "compare", "--shapes", shapes, ev])
    assert res.exit_code == 1, res.output
    assert res.output.startswith(f"error: {shapes}: ") and "'rules' given twice" in res.output, res.output
    fresh = _shapes(tmp_path / "shapes2.json", ["atlas"])
    _dup(Path(ev), "curves")
    res = CliRunner().invoke(main, ["eval", "compare", "--shapes", fresh, ev])
    assert res.exit_code == 1, res.output
    assert f"{ev}: " in res.output and "'curves' given twice" in res.output, res.output
