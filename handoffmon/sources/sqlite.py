"""The SQLite source: aggregates a monitor persisted (``pipeline.aggregates``) → ``Counts``."""

from __future__ import annotations

from pathlib import Path

from handoffmon.counts import Counts


def read_sqlite(path: str | Path) -> Counts:
    """Load the counts a monitor with ``store``/aggregates persistence wrote to ``path``.

    Raises:
        StoreError: the file is missing or holds no handoffmon aggregates.
    """
    from handoffmon.pipeline.aggregates import load_counts_sqlite

    return load_counts_sqlite(path)
