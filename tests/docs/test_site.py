"""The docs site builds strictly, the README stays short and points into it, ADRs keep their shape."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from importlib.util import find_spec
from pathlib import Path

import yaml

from tests.conftest import require
from tests.docs.snippets import DOCS, README, ROOT, pages

README_MAX_LINES = 200


def _nav_pages(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [p for item in node for p in _nav_pages(item)]
    if isinstance(node, dict):
        return [p for value in node.values() for p in _nav_pages(value)]
    return []


def _mkdocs_config() -> dict[str, object]:
    # mkdocs.yml uses no custom YAML tags, so the safe loader reads it
    data = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    """`mkdocs build --strict` succeeds: no broken links or anchors, no page missing from the nav."""
    installed = find_spec("mkdocs") is not None and find_spec("material") is not None
    require(installed, "mkdocs-material not installed (dev extra)")
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "site" / "reference" / "configuration" / "index.html").is_file()


def test_every_docs_page_is_in_the_nav() -> None:
    """Each page under docs/ appears in mkdocs.yml's nav exactly once, and every nav entry exists."""
    nav = _nav_pages(_mkdocs_config()["nav"])
    files = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(nav) == files


def test_readme_is_short_and_its_links_resolve() -> None:
    """The README fits on two screens, shows the two commands, and every relative link exists."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    assert "bash scripts/demo.sh" in text and "bash scripts/test.sh" in text
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if "://" not in link]
    assert local, "the README links into the docs"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, missing


def test_decision_records_have_context_decision_consequences() -> None:
    """ADRs are numbered without gaps, have the three sections, and are listed in the index."""
    records = sorted((DOCS / "decisions").glob("[0-9][0-9][0-9][0-9]-*.md"))
    assert [int(p.name[:4]) for p in records] == list(range(1, len(records) + 1))
    index = (DOCS / "decisions" / "index.md").read_text(encoding="utf-8")
    for path in records:
        text = path.read_text(encoding="utf-8")
        assert text.startswith(f"# {path.name[:4]}: "), path.name
        for section in ("## Context", "## Decision", "## Consequences"):
            assert f"\n{section}\n" in text, f"{path.name}: no {section}"
        assert f"]({path.name})" in index, f"{path.name} missing from decisions/index.md"


def test_no_page_is_a_placeholder() -> None:
    """No HTML comment says a section is pending, a placeholder or not written yet, and no TODO,
    TBD or FIXME is left in the README, the docs or mkdocs.yml."""
    note = re.compile(r"<!--(?:(?!-->).)*\b(pending|placeholder|not yet|todo)\b", re.I | re.S)
    for path in [*pages(), ROOT / "mkdocs.yml"]:
        text = path.read_text(encoding="utf-8")
        found = note.search(text) or re.search(r"\b(TODO|TBD|FIXME)\b", text)
        assert found is None, f"{path.relative_to(ROOT)}: {found.group(0)[:120] if found else ''}"


def test_readme_and_install_page_name_every_extra() -> None:
    """Each extra in pyproject.toml is named in the README and in the install page's table."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    readme = README.read_text(encoding="utf-8")
    install = (DOCS / "getting-started" / "install.md").read_text(encoding="utf-8")
    for name in extras:
        assert f"`{name}`" in readme or f"handoffmon[{name}]" in readme, f"README does not name {name}"
        assert f"| `{name}` |" in install, f"install.md's table has no row for {name}"


def _github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lowercased, characters other than letters,
    digits, spaces, hyphens and underscores dropped, each space a hyphen (runs are not collapsed,
    unlike mkdocs' slugify: `3.11 + LiteLLM` is `311--litellm` on GitHub, `311-litellm` here)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"[^\w\- ]", "", text.replace("`", "").strip().lower())
    return text.replace(" ", "-")


def _github_anchors(path: Path) -> set[str]:
    text = re.sub(r"^[ \t]*```.*?^[ \t]*```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", text, flags=re.M):
        slug = _github_slug(heading)
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def test_readme_anchors_resolve_where_the_readme_is_read() -> None:
    """The README is read on the repository host, not in the mkdocs site (whose strict build checks
    the pages' anchors): its `#anchor` links, to its own headings or into docs/, must be GitHub's
    slugs of a heading there."""
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", text)
    assert links, "the README links to sections"
    broken = [
        f"{target}#{anchor}"
        for target, anchor in links
        if "://" not in target and anchor not in _github_anchors(ROOT / target if target else README)
    ]
    assert not broken, broken
