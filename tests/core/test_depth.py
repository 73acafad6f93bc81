"""Depth buckets: default labels, boundaries, custom edges, round trip from labels."""

from __future__ import annotations

import pytest

from handoffmon.depth import DepthBuckets


def test_default_labels() -> None:
    assert DepthBuckets().labels == (
        "1", "2", "3-4", "5-8", "9-12", "13-16", "17-24", "25-32", "33-48", "49-64", "65-96", "97+",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("depth", "label"),
    [
        (0, "1"),
        (1, "1"),
        (2, "2"),
        (3, "3-4"),
        (4, "3-4"),
        (5, "5-8"),
        (16, "13-16"),
        (32, "25-32"),
        (33, "33-48"),
        (10**6, "97+"),
    ],
)
def test_bucket_boundaries(depth: int, label: str) -> None:
    assert DepthBuckets().bucket(depth) == label


def test_custom_edges_and_from_labels() -> None:
    b = DepthBuckets((1, 4, 10))
    assert b.labels == ("1-3", "4-9", "10+")
    assert DepthBuckets.from_labels(["10+", "1-3", "4-9"]) == b


@pytest.mark.parametrize("edges", [(), (2, 3), (1, 1), (1, 5, 3)])
def test_bad_edges_rejected(edges: tuple[int, ...]) -> None:
    with pytest.raises(ValueError):
        DepthBuckets(edges)
