"""The background pipeline: Monitor facade, bounded worker queue, aggregates and conversation state."""

from __future__ import annotations

from handoffmon.pipeline.aggregates import Aggregates, load_counts_sqlite
from handoffmon.pipeline.monitor import Monitor

__all__ = ["Aggregates", "Monitor", "load_counts_sqlite"]
