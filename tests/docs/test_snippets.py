"""Every code snippet in the README and the docs runs, parses or names real commands."""

from __future__ import annotations

import contextlib
import io
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from handoffmon.checkers import RuleSet
from handoffmon.config import HandoffmonConfig, config_from_mapping
from handoffmon.runtime.build import _shared
from tests.conftest import require_binary
from tests.docs.snippets import (
    ROOT,
    Block,
    all_blocks,
    blocks,
    expected_output,
    pages,
    resolve_command,
    shell_commands,
)

PAGES_WITH_PYTHON = [p for p in pages() if any(b.lang == "python" for b in blocks(p))]
EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("page", PAGES_WITH_PYTHON, ids=_rel)
def test_python_snippets_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A page's python blocks run in order in one namespace (cwd: a temporary directory).

    Blocks marked ``<!-- test: skip … -->`` are fragments; blocks marked with a test file are run
    by that test, which must exist and name the page. A block that prints and ends with ``# …``
    comment lines documents its output: what it prints must be exactly those lines.
    """
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    before = set(map(id, _shared.values()))
    try:
        for block in blocks(page):
            if block.lang != "python":
                continue
            if block.mark is not None:
                _check_mark(block)
                continue
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(block.code, block.id, "exec"), namespace)
            printed, documented = out.getvalue().splitlines(), expected_output(block.code)
            if printed and documented:
                assert printed == documented, f"{block.id} prints {printed}, the page shows {documented}"
    finally:
        # a snippet's `handoffmon.wrap(router)` exports into the global registry, as in an
        # application; close the runtimes it built so later tests see that registry clean
        for runtime in [r for r in _shared.values() if id(r) not in before]:
            runtime.close(0)


def _check_mark(block: Block) -> None:
    if block.mark is not None and block.mark.startswith("skip"):
        assert block.mark.removeprefix("skip").strip(" :—-"), f"{block.id}: say why it is skipped"
        return
    test = ROOT / str(block.mark)
    assert test.is_file(), f"{block.id}: marker names {block.mark}, which does not exist"
    assert block.page in test.read_text(encoding="utf-8"), f"{block.mark} does not read {block.page}"


MARKED = [b for p in pages() for b in blocks(p) if b.mark is not None and b.lang != "python"]


@pytest.mark.parametrize("block", MARKED, ids=lambda b: b.id)
def test_marked_blocks_name_a_test_that_reads_the_page(block: Block) -> None:
    """A yaml or shell block marked with a test file is claimed by a test that exists and reads it."""
    _check_mark(block)


def _is_config(data: object) -> bool:
    return isinstance(data, dict) and bool(data) and set(data) <= set(HandoffmonConfig.model_fields)


@pytest.mark.parametrize("block", all_blocks("yaml"), ids=lambda b: b.id)
def test_yaml_snippets_parse_and_configs_validate(block: Block) -> None:
    """YAML blocks parse; those that are handoffmon configs validate, and their rules compile."""
    if block.mark is not None and block.mark.startswith("skip"):
        return
    data = yaml.safe_load(block.code)
    if _is_config(data):
        cfg = config_from_mapping(data, source=block.id)
        RuleSet.from_config(cfg.rules, source=block.id)


@pytest.mark.parametrize("block", all_blocks("bash"), ids=lambda b: b.id)
def test_shell_snippets_name_real_commands_options_and_extras(block: Block) -> None:
    """`handoffmon …` lines use existing commands and options; scripts exist; pip extras exist."""
    for line in shell_commands(block.code):
        argv = shlex.split(line)
        while argv and "=" in argv[0] and not argv[0].startswith("-"):
            argv = argv[1:]  # VAR=value prefixes
        if not argv:
            continue
        if argv[0] == "handoffmon":
            cmd, args = resolve_command(argv)
            known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
            for arg in args:
                if arg.startswith("--"):
                    assert arg.split("=", 1)[0] in known, f"{block.id}: {cmd.name} has no option {arg}"
        elif argv[0] == "bash" and argv[1].startswith("scripts/"):
            assert (ROOT / argv[1]).is_file(), f"{block.id}: {argv[1]} does not exist"
        elif argv[:2] == ["pip", "install"]:
            for arg in argv[2:]:
                if arg.startswith("handoffmon["):
                    extras = arg.removeprefix("handoffmon[").rstrip("]").split(",")
                    assert set(extras) <= EXTRAS, f"{block.id}: unknown extra in {arg}"


def _expressions(code: str) -> list[str]:
    """PromQL expressions of a block: comment lines dropped, blank lines separate expressions."""
    exprs, current = [], []
    for line in [*code.splitlines(), ""]:
        if line.strip().startswith("#"):
            continue
        if line.strip():
            current.append(line.strip())
        elif current:
            exprs.append(" ".join(current))
            current = []
    return exprs


def test_promql_snippets_are_valid_expressions(tmp_path: Path) -> None:
    """Every PromQL expression in the docs passes `promtool check rules` as a recording rule."""
    promtool = require_binary("promtool")
    exprs = [e for b in all_blocks("promql") for e in _expressions(b.code)]
    assert exprs, "the docs show PromQL; none was found"
    rules = [{"record": f"docs:snippet_{i}", "expr": e} for i, e in enumerate(exprs)]
    path = tmp_path / "snippets.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "docs", "rules": rules}]}))
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
