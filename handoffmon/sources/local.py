"""The local source: counts from an in-process snapshot callable (e.g. ``Monitor.snapshot``)."""

from __future__ import annotations

from collections.abc import Callable

from handoffmon.counts import Counts
from handoffmon.sources import SourceError


def from_snapshot(snapshot: Callable[[], Counts]) -> Counts:
    """Take one snapshot and check it is a ``Counts``.

    Args:
        snapshot: e.g. ``monitor.snapshot`` or ``aggregates.snapshot``.

    Raises:
        SourceError: the callable failed or returned something else.
    """
    try:
        counts = snapshot()
    except Exception as exc:
        raise SourceError(f"local snapshot failed: {exc}") from exc
    if not isinstance(counts, Counts):
        raise SourceError(f"local snapshot returned {type(counts).__name__}, not Counts")
    return counts
