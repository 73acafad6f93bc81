"""Moved to :mod:`handoffmon.cardinality` (the aggregates cap names at ingest too); kept for old imports."""

from handoffmon.cardinality import ALL_RULES, ALWAYS_ALLOWED, MAX_LABEL_CHARS, MAX_STAGES, OTHER, LabelGuard

__all__ = ["ALL_RULES", "ALWAYS_ALLOWED", "MAX_LABEL_CHARS", "MAX_STAGES", "OTHER", "LabelGuard"]
