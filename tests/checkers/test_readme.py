"""The README's checkers section: its Python example runs and its rule YAML loads."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from handoffmon.checkers import RuleSet
from handoffmon.config import config_from_mapping

README = Path(__file__).parent.parent.parent / "README.md"


def _section() -> str:
    text = README.read_text(encoding="utf-8")
    return text[text.index("<!-- section:checkers -->") : text.index("<!-- /section:checkers -->")]


def test_custom_checker_example_runs() -> None:
    """The 'your own checker' example executes as written (it asserts its own result)."""
    blocks = re.findall(r"```python\n(.*?)```", _section(), re.DOTALL)
    example = next(b for b in blocks if "registry.register" in b)
    exec(compile(example, "README.md", "exec"), {})


def test_rule_yaml_example_compiles() -> None:
    """The rules YAML example is a valid config whose rules compile."""
    block = re.findall(r"```yaml\n(.*?)```", _section(), re.DOTALL)[0]
    cfg = config_from_mapping(yaml.safe_load(block))
    assert RuleSet.from_config(cfg.rules).names == ("json_reply", "words_300")


def test_request_rules_example_parses() -> None:
    """The per-request metadata example is accepted by parse_request_rules."""
    block = next(b for b in re.findall(r"```python\n(.*?)```", _section(), re.DOTALL) if "metadata=" in b)
    meta_src = block[block.index("{") : block.rindex("})") + 1]
    metadata = eval(meta_src, {})  # a literal dict copied from the README
    names = [r.name for r in RuleSet().parse_request_rules(metadata)]
    assert names == ["lowercase", "end"]
