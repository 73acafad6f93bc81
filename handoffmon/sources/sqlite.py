"""The SQLite source: aggregates a monitor persisted (``pipeline.aggregates``) → ``Counts``."""

from __future__ import annotations

from pathlib import Path

from handoffmon.counts import Counts


def read_sqlite(path: str | Path) -> Counts:
    """Load the counts a monitor with ``store``/aggregates persistence wrote to ``path``.

    Rows are read strictly: a row this release cannot read, or a count that is not an integer
    ≥ 0, is an error (the monitor itself skips such rows to start; a refit must not quietly
    lose counters).

    Raises:
        StoreError: the file is missing, holds no handoffmon aggregates, or a damaged row.
    """
    from handoffmon.pipeline.aggregates import load_counts_sqlite

    return load_counts_sqlite(path, strict=True)
