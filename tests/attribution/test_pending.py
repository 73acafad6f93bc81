"""Pins authorship merging (collision markers) and the bounded pending overlay."""

from __future__ import annotations

from handoffmon.attribution.pending import PendingOverlay, merge_authorship
from handoffmon.protocols import Authorship

A = Authorship(("gpt-4o",), 2, 1.0, "conv-1")


def test_first_write_and_identical_rewrite_are_kept() -> None:
    """Nothing stored → the new value; the same authorship again → unchanged values."""
    assert merge_authorship(None, A) is A
    again = Authorship(("gpt-4o",), 2, 5.0, "conv-1")
    assert merge_authorship(A, again) == again


def test_different_authors_make_a_sticky_marker() -> None:
    """Two authors for one key → no authors; a later single author cannot undo it."""
    marker = merge_authorship(A, Authorship(("claude",), 2, 2.0, "conv-2"))
    assert marker.authors == () and marker.depth == 0
    assert merge_authorship(marker, A).authors == ()


def test_different_depth_or_conversation_blurs_only_that_field() -> None:
    """Same author at another depth → depth 0; in another conversation → no conversation id."""
    other_depth = merge_authorship(A, Authorship(("gpt-4o",), 5, 2.0, "conv-1"))
    assert (other_depth.authors, other_depth.depth, other_depth.conversation_id) == (("gpt-4o",), 0, "conv-1")
    other_conv = merge_authorship(A, Authorship(("gpt-4o",), 2, 2.0, "conv-2"))
    assert (other_conv.depth, other_conv.conversation_id) == (2, "")


def test_overlay_drop_keeps_newer_entries() -> None:
    """drop() removes only what that add() wrote, not a later re-add of the same key."""
    overlay = PendingOverlay()
    first = overlay.add([("k1", A), ("k2", A)])
    overlay.add([("k2", A)])
    overlay.drop(["k1", "k2"], first)
    assert overlay.get("k1") is None and overlay.get("k2") == A


def test_overlay_merges_collisions_and_is_bounded() -> None:
    """Pending collisions become markers at once; the overlay keeps at most max_items keys."""
    overlay = PendingOverlay(max_items=3)
    overlay.add([("k", A)])
    overlay.add([("k", Authorship(("claude",), 2, 1.0, "c"))])
    assert overlay.get("k") is not None and overlay.get("k").authors == ()  # type: ignore[union-attr]
    overlay.add([(f"x{i}", A) for i in range(5)])
    assert len(overlay) == 3


def test_overlay_get_many_is_get_in_order() -> None:
    """get_many answers like get, key by key, None for keys never added or dropped."""
    overlay = PendingOverlay()
    seq = overlay.add([("a", A), ("b", A)])
    assert overlay.get_many(["b", "x", "a"]) == [A, None, A]
    overlay.drop(["a"], seq)
    assert overlay.get_many(["a", "b"]) == [overlay.get("a"), overlay.get("b")] == [None, A]
