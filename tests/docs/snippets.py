"""Code blocks of the README and the docs pages, with the markers that say how each is tested."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

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


def claimed(page: str, test_file: str) -> list[Block]:
    """The python blocks of ``page`` whose marker names ``test_file`` (the test that runs them)."""
    return [b for b in blocks(ROOT / page) if b.lang == "python" and b.mark == test_file]


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
