"""Self-contained HTML report of a refit (inline SVG/CSS/JS; opens offline)."""

from __future__ import annotations

from handoffmon.report.html import render_report

__all__ = ["render_report"]
