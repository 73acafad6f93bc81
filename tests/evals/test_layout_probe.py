"""The layout probe's label-overlap test, on labels whose geometry is known: it must flag labels
whose glyph boxes overlap, rotated or not, and pass rotated column labels that are only close
(their axis-aligned bounding rects overlap, their drawn boxes do not)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import require_binary
from tests.evals.layout import probe

LABEL = "experimental-large-2025"


def _page(texts: str) -> str:
    return (
        "<html><body><div class='card'><h2>t</h2>"
        "<svg class='chart' width='600' height='300' style='font: 12px sans-serif'>"
        f"{texts}</svg></div></body></html>"
    )


def _clash(tmp_path: Path, name: str, texts: str) -> list[list[str]]:
    page = tmp_path / f"{name}.html"
    page.write_text(_page(texts), encoding="utf-8")
    (svg,) = probe(require_binary("chromium"), page, tmp_path)["svgs"]
    return svg["clash"]  # type: ignore[no-any-return]


def _rotated(x: int, text: str) -> str:
    return f"<text x='{x}' y='200' transform='rotate(-45 {x} 200)'>{text}</text>"


def test_rotated_column_labels_a_column_apart_do_not_clash(tmp_path: Path) -> None:
    """40 px apart at 45°: 28 px between the parallel labels, over twice their height."""
    assert _clash(tmp_path, "apart", _rotated(100, LABEL) + _rotated(140, "general-purpose-v2")) == []


def test_rotated_labels_drawn_over_each_other_clash(tmp_path: Path) -> None:
    """4 px apart at 45°: under 3 px between the parallel labels, less than their height."""
    assert _clash(tmp_path, "over", _rotated(100, LABEL) + _rotated(104, "general-purpose-v2")) == [
        [LABEL, "general-purpose-v2"]
    ]


def test_level_labels_overlap_as_before(tmp_path: Path) -> None:
    level = f"<text x='100' y='50'>{LABEL}</text><text x='150' y='52'>second</text>"
    assert _clash(tmp_path, "level", level) == [[LABEL, "second"]]
    apart = f"<text x='100' y='50'>{LABEL}</text><text x='100' y='80'>second</text>"
    assert _clash(tmp_path, "level-apart", apart) == []
