"""Adapters that produce ``Counts`` for the refit: local snapshots, CSV files, SQLite, Prometheus."""

from __future__ import annotations

from handoffmon.errors import HandoffmonError


class SourceError(HandoffmonError):
    """A counts source could not be read (server unreachable, bad response, bad spec)."""


__all__ = ["SourceError"]
