"""The `handoffmon check` and `handoffmon ifeval` commands."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from handoffmon.cli import main

DATA = Path(__file__).parent.parent / "data" / "ifeval"
RULES = """
rules:
  - name: json
    check: valid_json
  - name: flip
    check: answer_flip
"""


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _lines(*objs: dict[str, object]) -> str:
    return "".join(json.dumps(o) + "\n" for o in objs)


def test_check_prints_per_rule_pass_rates(tmp_path: Path) -> None:
    """Pass rate = pass / (pass + fail); conversation state and per-request rules carry across lines."""
    rules = _write(tmp_path, "rules.yaml", RULES)
    replies = _write(
        tmp_path,
        "r.jsonl",
        _lines(
            {"reply": '{"a": 1}', "conversation_id": "c"},
            {"reply": "<answer>1</answer>", "conversation_id": "c", "depth": 2},
            {
                "reply": "<answer>2</answer>",
                "conversation_id": "c",
                "depth": 3,
                "user_message": "Are you sure?",
                "metadata": {
                    "handoffmon": {
                        "rules": [{"name": "short", "check": "length", "params": {"unit": "words", "max": 3}}]
                    }
                },
            },
        ),
    )
    out = tmp_path / "v.jsonl"
    result = CliRunner().invoke(
        main, ["check", "--rules", rules, "--input", replies, "--json", "--output", str(out)]
    )
    assert result.exit_code == 0, result.output
    summary = {r["rule"]: r for r in json.loads(result.output)["rules"]}
    assert summary["json"]["pass"] == 1 and summary["json"]["fail"] == 2
    assert summary["json"]["pass_rate"] == 1 / 3
    assert (summary["flip"]["fail"], summary["flip"]["not_applicable"]) == (1, 2)
    assert summary["short"]["pass"] == 1
    assert len(out.read_text().splitlines()) == 7


def test_check_table_output(tmp_path: Path) -> None:
    """Without --json a table with one row per rule is printed."""
    rules = _write(tmp_path, "rules.yaml", RULES)
    replies = _write(tmp_path, "r.jsonl", _lines({"reply": "[]"}))
    result = CliRunner().invoke(main, ["check", "--rules", rules, "--input", replies])
    assert result.exit_code == 0
    assert "json" in result.output and "100.0%" in result.output


def test_check_bad_input_names_file_and_line(tmp_path: Path) -> None:
    """A malformed line fails with the file and line number; a bad rule names rule and key."""
    rules = _write(tmp_path, "rules.yaml", RULES)
    replies = _write(tmp_path, "r.jsonl", _lines({"reply": "x"}) + "{not json\n")
    result = CliRunner().invoke(main, ["check", "--rules", rules, "--input", replies])
    assert result.exit_code == 1
    assert f"{replies}:2" in result.output
    bad_depth = _write(tmp_path, "d.jsonl", _lines({"reply": "x", "depth": 0}))
    assert "'depth'" in CliRunner().invoke(main, ["check", "--rules", rules, "--input", bad_depth]).output
    bad_yaml = "- name: x\n  check: regex_must_match\n  params: {pattern: '('}\n"
    bad_rules = _write(tmp_path, "bad.yaml", bad_yaml)
    result = CliRunner().invoke(main, ["check", "--rules", bad_rules, "--input", replies])
    assert result.exit_code == 1
    assert "rules['x'].params.pattern" in result.output and "bad.yaml" in result.output


def test_ifeval_command_writes_reference_fields(tmp_path: Path) -> None:
    """Output rows carry the reference's five fields; accuracy lines are printed."""
    inputs = [json.loads(x) for x in (DATA / "input_data.jsonl").read_text().splitlines()[:20]]
    responses = {
        json.loads(x)["prompt"]: json.loads(x)["response"]
        for x in (DATA / "responses_llama31_8b.jsonl").read_text().splitlines()
    }
    inp = _write(tmp_path, "in.jsonl", _lines(*inputs))
    resp = _write(
        tmp_path,
        "resp.jsonl",
        _lines(*({"prompt": i["prompt"], "response": responses[i["prompt"]]} for i in inputs)),
    )
    out = tmp_path / "res.jsonl"
    result = CliRunner().invoke(
        main,
        [
            "ifeval",
            "--input",
            inp,
            "--responses",
            resp,
            "--mode",
            "loose",
            "--output",
            str(out),
            "--by-instruction",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "prompt-level:" in result.output and "instruction-level:" in result.output
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 20
    assert set(rows[0]) == {
        "prompt",
        "response",
        "instruction_id_list",
        "follow_instruction_list",
        "follow_all_instructions",
    }
    assert all(r["follow_all_instructions"] == all(r["follow_instruction_list"]) for r in rows)


def test_ifeval_bad_input_names_file_and_line(tmp_path: Path) -> None:
    """Unknown instruction ids, bad kwargs and missing responses are clear errors."""
    inp = _write(
        tmp_path,
        "in.jsonl",
        _lines(
            {"key": 1, "prompt": "p", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]},
            {"key": 2, "prompt": "q", "instruction_id_list": ["nope:nope"], "kwargs": [{}]},
        ),
    )
    resp = _write(tmp_path, "resp.jsonl", _lines({"prompt": "p", "response": "r"}))
    args = ["ifeval", "--input", inp, "--responses", resp, "--output", str(tmp_path / "o.jsonl")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1 and f"{inp}:2" in result.output and "nope:nope" in result.output
    inp2 = _write(
        tmp_path,
        "in2.jsonl",
        _lines({"key": 7, "prompt": "z", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}),
    )
    result = CliRunner().invoke(
        main, ["ifeval", "--input", inp2, "--responses", resp, "--output", str(tmp_path / "o.jsonl")]
    )
    assert result.exit_code == 1 and "key 7" in result.output


def test_config_check_compiles_rules(tmp_path: Path) -> None:
    """`handoffmon config check` compiles rules through RuleSet: a bad regex names rule and key."""
    good = _write(tmp_path, "good.yaml", RULES)
    result = CliRunner().invoke(main, ["config", "check", good])
    assert result.exit_code == 0 and "2 rule(s)" in result.output
    bad = _write(
        tmp_path,
        "bad.yaml",
        "rules:\n  - name: r\n    check: regex_must_match\n    params: {pattern: '(?=x)'}\n",
    )
    result = CliRunner().invoke(main, ["config", "check", bad])
    assert result.exit_code == 1
    assert "rules['r'].params.pattern" in result.output and "lookahead" in result.output


def test_check_accepts_toml_rules_and_reports_bad_yaml(tmp_path: Path) -> None:
    """Rules may be TOML; unparsable YAML is an error naming the file."""
    toml_rules = _write(tmp_path, "rules.toml", '[[rules]]\nname = "c"\ncheck = "no_commas"\n')
    replies = _write(tmp_path, "r.jsonl", _lines({"reply": "a, b"}, {"reply": "ab"}))
    result = CliRunner().invoke(main, ["check", "--rules", toml_rules, "--input", replies, "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)["rules"]
    assert (row["rule"], row["pass"], row["fail"]) == ("c", 1, 1)
    bad = _write(tmp_path, "bad.yaml", "rules: [unclosed\n")
    result = CliRunner().invoke(main, ["check", "--rules", bad, "--input", replies])
    assert result.exit_code == 1 and "bad.yaml" in result.output and "not valid YAML" in result.output


def test_check_refuses_a_rules_file_with_a_key_given_twice_or_not_utf8(tmp_path: Path) -> None:
    """The rules file is read as config files are: a second ``params`` in one rule would
    silently replace the first (yaml.safe_load keeps the last), and bytes that are not UTF-8
    are not a rules file; each is one error naming the file, exit 1."""
    replies = _write(tmp_path, "r.jsonl", _lines({"reply": "a, b"}))
    twice = _write(
        tmp_path,
        "twice.yaml",
        "rules:\n  - name: c\n    check: length\n    params: {unit: words, max: 3}\n"
        "    params: {unit: words, max: 300}\n",
    )
    result = CliRunner().invoke(main, ["check", "--rules", twice, "--input", replies])
    assert result.exit_code == 1, result.output
    assert "twice.yaml" in result.output and "'params' given twice" in result.output
    assert "lines 4 and 5" in result.output
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"rules: \xff\xfe\n")
    result = CliRunner().invoke(main, ["check", "--rules", str(binary), "--input", replies])
    assert result.exit_code == 1 and "binary.yaml" in result.output and "not UTF-8" in result.output
    assert "Traceback" not in result.output


def test_check_and_ifeval_on_empty_input_exit_4_and_write_nothing(tmp_path: Path) -> None:
    """An empty replies or prompts file is NO_DATA (exit 4) naming the file, not "0 replies" or
    "prompt-level: 0.0000" with exit 0; no output file is left behind."""
    rules = _write(tmp_path, "rules.yaml", RULES)
    empty = _write(tmp_path, "empty.jsonl", "")
    out = tmp_path / "v.jsonl"
    res = CliRunner().invoke(main, ["check", "--rules", rules, "--input", empty, "--output", str(out)])
    assert res.exit_code == 4, res.output
    assert f"error: {empty}: no replies" in res.stderr and not out.exists()
    args = ["ifeval", "--input", empty, "--responses", empty, "--output", str(out)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 4, res.output
    assert f"error: {empty}: no prompts" in res.stderr and not out.exists()
