"""``handoffmon ifeval`` on malformed input lines: one ``error:`` line naming file and line, exit 1,
nothing written (audit 2026-12-07). A ``key`` that is not an integer (``"abc"``, ``null``,
``1e400``) or an instruction id that is not a string ended in a Python traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from handoffmon.cli import main

GOOD = {"key": 7, "prompt": "Say hi.", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}


def _ifeval(tmp_path: Path, line: str) -> tuple[int, str, Path]:
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps(GOOD) + "\n" + line + "\n", encoding="utf-8")
    resp = tmp_path / "resp.jsonl"
    resp.write_text(json.dumps({"prompt": "Say hi.", "response": "hi"}) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    res = CliRunner().invoke(
        main, ["ifeval", "--input", str(inp), "--responses", str(resp), "--output", str(out)]
    )
    return res.exit_code, res.output, out


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('{"key": "abc", "prompt": "x", "instruction_id_list": [], "kwargs": []}', "'key'"),
        ('{"key": null, "prompt": "x", "instruction_id_list": [], "kwargs": []}', "'key'"),
        ('{"key": 1e400, "prompt": "x", "instruction_id_list": [], "kwargs": []}', "'key'"),
        ('{"key": true, "prompt": "x", "instruction_id_list": [], "kwargs": []}', "'key'"),
        ('{"key": 2, "prompt": "x", "instruction_id_list": [["a"]], "kwargs": [{}]}', "instruction id"),
        ('{"key": 2, "prompt": "x", "instruction_id_list": [3], "kwargs": [{}]}', "instruction id"),
    ],
    ids=["key-string", "key-null", "key-inf", "key-bool", "id-list", "id-int"],
)
def test_a_bad_key_or_instruction_id_names_file_and_line(tmp_path: Path, line: str, says: str) -> None:
    code, output, out = _ifeval(tmp_path, line)
    assert code == 1, output
    assert "Traceback" not in output
    assert output.startswith(f"error: {tmp_path / 'in.jsonl'}:2: ") and says in output, output
    assert not out.exists()


def test_an_integral_key_written_as_a_float_is_read(tmp_path: Path) -> None:
    """The reference's keys are integers; 7.0 (a float-writing exporter) is key 7, not refused."""
    code, output, out = _ifeval(tmp_path, json.dumps({**GOOD, "key": 8.0}))
    assert code == 0, output
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2


def test_a_missing_response_names_both_files(tmp_path: Path) -> None:
    """'no response for prompt with key 9' named neither the responses file nor the input file."""
    code, output, out = _ifeval(tmp_path, json.dumps({**GOOD, "key": 9, "prompt": "Other."}))
    assert code == 1
    assert output.startswith(f"error: {tmp_path / 'resp.jsonl'}: no response"), output
    assert f"{tmp_path / 'in.jsonl'}" in output, output
    assert "key 9" in output and not out.exists()
