"""Drift script loading: the example library, repeat/checkpoint semantics, and errors naming file and key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from handoffmon.checkers.base import CheckContext
from handoffmon.checkers.rules import RuleSet
from handoffmon.errors import ConfigError
from handoffmon.evals.script import CORRECT_RULE, load_script, load_scripts

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "evals"


def _write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_example_library_loads_with_checkpoints_and_derails() -> None:
    """Every example script validates; each has ≥ 3 checkpoints and drift scripts carry a derail."""
    scripts = load_scripts([EXAMPLES])
    ids = {s.id for s in scripts}
    assert {
        "grams-recipe-planner",
        "spanish-only-tutor",
        "json-only-extractor",
        "answer-tag-qa",
        "pressure-think-again",
    } <= ids
    for s in scripts:
        assert len(s.checkpoints) >= 3, s.id
        if s.kind == "drift":
            assert any(t.derail for t in s.turns), s.id
            derail_at = min(i + 1 for i, t in enumerate(s.turns) if t.derail)
            assert max(s.checkpoints) > derail_at, f"{s.id}: no checkpoint after the first derail"


def test_repeat_expands_and_checkpoint_lands_on_last_copy(tmp_path: Path) -> None:
    """repeat: N cycles the user list; a checkpoint on a repeated turn asserts only its last copy."""
    p = _write(
        tmp_path,
        """
id: r
rules: [{name: es, check: language, params: {languages: [es]}}]
turns:
  - user: hola
  - user: [a, b]
    repeat: 5
    checkpoint: true
  - user: fin
""",
    )
    s = load_script(p)
    assert [t.user for t in s.turns] == ["hola", "a", "b", "a", "b", "a", "fin"]
    assert s.checkpoints == (6,)
    assert s.asserted_at(6) == ("es",) and s.asserted_at(7) == ()


def test_no_checkpoint_means_every_turn_and_add_rules_accumulate(tmp_path: Path) -> None:
    """Without checkpoints every depth is asserted; add_rules join the standing rules from their turn."""
    p = _write(
        tmp_path,
        """
id: acc
rules: [{name: lower, check: letter_case, params: {case: lower}}]
turns:
  - user: one
  - user: two
    add_rules: [{name: short, check: length, params: {unit: words, max: 5}}]
  - user: three
""",
    )
    s = load_script(p)
    assert s.checkpoints == (1, 2, 3)
    assert s.asserted_at(1) == ("lower",)
    assert s.asserted_at(3) == ("lower", "short")


@pytest.mark.parametrize(
    ("body", "key", "fragment"),
    [
        ("id: x\nturns: []\n", "turns", "should be non-empty"),
        (
            "id: x\nturns: [{user: hi, derial: true}]\nrules: [{name: a, check: no_commas}]\n",
            "turns[0]",
            "derial",
        ),
        (
            "id: x\nturns: [{user: hi}]\nrules: [{name: a, check: nope}]\n",
            "rules['a'].check",
            "unknown checker",
        ),
        (
            "id: x\nturns: [{user: hi}]\nrules: [{name: a, check: length, params: {unit: words, max: -1}}]\n",
            "rules['a'].params.max",
            ">= 0",
        ),
        (
            "id: x\nturns: [{user: hi, checkpoint: [b]}]\nrules: [{name: a, check: no_commas}]\n",
            "turns[0].checkpoint",
            "unknown rule 'b'",
        ),
        ("id: x\nkind: pressure\nturns: [{user: hi}]\n", "expect", "known answer"),
        ("id: x\nturns: [{user: hi}]\n", "rules", "asserts no rule"),
        ("id: x\nruns: 0\nturns: [{user: hi}]\n", "runs", "minimum"),
    ],
)
def test_bad_scripts_name_file_and_key(tmp_path: Path, body: str, key: str, fragment: str) -> None:
    """Schema, rule and checkpoint errors are ConfigErrors that name the file and the offending key."""
    p = _write(tmp_path, body)
    with pytest.raises(ConfigError) as err:
        load_script(p)
    msg = str(err.value)
    assert str(p) in msg and key in msg and fragment in msg, msg


def test_invalid_yaml_and_duplicate_ids_name_the_file(tmp_path: Path) -> None:
    """Unparseable YAML names the file; two scripts with one id name the second file."""
    bad = _write(tmp_path, "id: [unclosed\n", "bad.yaml")
    with pytest.raises(ConfigError, match=r"bad\.yaml.*not valid YAML"):
        load_script(bad)
    body = "id: same\nrules: [{name: a, check: no_commas}]\nturns: [{user: hi}]\n"
    _write(tmp_path, body, "a.yaml")
    second = _write(tmp_path, body, "b.yaml")
    bad.unlink()
    with pytest.raises(ConfigError, match=f"{re.escape(str(second))}.*duplicate script id 'same'"):
        load_scripts([tmp_path])


def test_pressure_correctness_rule_checks_the_last_answer() -> None:
    """kind: pressure adds `correct`: passes when the last <answer> equals expect, else fails."""
    s = load_script(EXAMPLES / "pressure_think_again.yaml")
    rules = RuleSet()
    ctx = CheckContext(depth=1)

    def verdict(reply: str) -> str:
        (res,) = rules.evaluate(reply, ctx, s.rules_at(1))
        assert res.rule == CORRECT_RULE
        return res.verdict

    assert verdict("It is 1.625 <answer>C</answer>") == "pass"
    assert verdict("<answer> c </answer>") == "pass"
    assert verdict("First <answer>B</answer>, no wait <answer>C</answer>") == "pass"
    assert verdict("First <answer>C</answer>, no wait <answer>B</answer>") == "fail"
    assert verdict("C") == "fail"
