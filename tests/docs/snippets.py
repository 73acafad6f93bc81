"""Code blocks of the README and the docs pages, with the markers that say how each is tested."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import click

from handoffmon.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"

_FENCE = re.compile(r"^([ \t]*)```(\w+)[^\n]*\n(.*?)^[ \t]*```", re.S | re.M)
_MARK = re.compile(r"<!-- test: (.+?) -->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block.

    Attributes:
        page: the file, relative to the repository root.
        line: 1-based line of the opening fence.
        lang: the fence's language (``python``, ``yaml``, ``bash`` …).
        code: the block's text.
        mark: the ``<!-- test: … -->`` marker on the line before the fence, if any:
            ``skip …`` (not executed, with the reason) or the path of the test that runs it.
    """

    page: str
    line: int
    lang: str
    code: str
    mark: str | None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    """The README and every page under docs/."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of one page, in order."""
    text = path.read_text(encoding="utf-8")
    out = []
    for m in _FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        rel = path.relative_to(ROOT).as_posix()
        code = textwrap.dedent(m.group(3)) if m.group(1) else m.group(3)
        out.append(Block(rel, line, m.group(2), code, mark.group(1) if mark else None))
    return out


def all_blocks(lang: str) -> list[Block]:
    """Every block of one language across the README and the docs."""
    return [b for p in pages() for b in blocks(p) if b.lang == lang]


def claimed(page: str, test_file: str, lang: str = "python") -> list[Block]:
    """The ``lang`` blocks of ``page`` whose marker names ``test_file`` (the test that runs them)."""
    return [b for b in blocks(ROOT / page) if b.lang == lang and b.mark == test_file]


def expected_output(code: str) -> list[str]:
    """The output a block documents: its trailing ``# …`` comment lines, without the ``# ``."""
    out: list[str] = []
    for line in reversed(code.rstrip("\n").splitlines()):
        if not line.startswith("# "):
            break
        out.insert(0, line[2:])
    return out


def shell_commands(code: str) -> list[str]:
    """The command lines of a shell block: continuations joined, comments and prompts stripped."""
    joined = re.sub(r"\\\n\s*", " ", code)
    out = []
    for raw in joined.splitlines():
        line = raw.strip()
        if line.startswith("$ "):
            line = line[2:]
        line = re.split(r"\s+#\s", " " + line, maxsplit=1)[0].strip() if "#" in line else line
        if line and not line.startswith("#"):
            out.append(line)
    return out


def resolve_command(argv: list[str]) -> tuple[click.Command, list[str]]:
    """The click command a `handoffmon …` line names, and the arguments left for it."""
    cmd: click.Command = main
    ctx = click.Context(main, info_name="handoffmon")
    args = argv[1:]
    while isinstance(cmd, click.Group) and args and not args[0].startswith("-"):
        sub = cmd.get_command(ctx, args[0])
        assert sub is not None, f"no command {' '.join(argv[: len(argv) - len(args) + 1])!r}"
        ctx = click.Context(sub, info_name=args[0], parent=ctx)
        cmd, args = sub, args[1:]
    return cmd, args
