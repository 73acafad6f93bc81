"""Structured logs: one event per turn, and handoffmon's own errors, without global structlog config."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Literal, TextIO

import structlog

from handoffmon.labels import MAX_LABEL_CHARS, exportable
from handoffmon.types import TurnResult

TURN_EVENT = "handoffmon.turn"
"""Event name of the per-turn log line."""

LogFormat = Literal["json", "console"]

_MAX_ERROR_CHARS = 200

MAX_ID_CHARS = 256
"""Longer ids are cut to this (caller conversation ids already are, at ingress)."""


def clip(value: str | None, limit: int = MAX_LABEL_CHARS) -> str | None:
    """``value`` cut to ``limit`` characters and made valid UTF-8 (``labels.exportable``): model,
    provider and deployment names come from requests and upstream responses, and one 100 kB name
    must not ride on every log line, span and event, nor a lone surrogate make OTLP drop the
    attribute. ``MAX_LABEL_CHARS`` by default, so a name there reads as the metrics' label for it."""
    return None if value is None else exportable(value[:limit])


def _processors(fmt: LogFormat) -> list[Any]:
    """Level, UTC timestamp, exception text, renderer; no locals are ever rendered."""
    renderer: Any
    if fmt == "console":
        # plain_traceback: Rich's default formatter prints local variables (i.e. content).
        renderer = structlog.dev.ConsoleRenderer(
            colors=False, exception_formatter=structlog.dev.plain_traceback
        )
        return [
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ]
    return [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        structlog.processors.JSONRenderer(sort_keys=False),
    ]


def make_logger(name: str = "handoffmon", *, fmt: LogFormat = "json", stream: TextIO | None = None) -> Any:
    """A structlog logger with its own processors (structlog's global config is not touched).

    Args:
        name: stdlib logger name the rendered lines go to (the application's logging
            config decides handlers and level), unless ``stream`` is given.
        fmt: ``json`` (one JSON object per line) or ``console`` (key=value, no colors).
        stream: write rendered lines straight to this text stream instead.

    Returns:
        A structlog ``BoundLogger``.
    """
    target: Any = structlog.PrintLogger(stream) if stream is not None else logging.getLogger(name)
    return structlog.wrap_logger(
        target,
        processors=_processors(fmt),
        # level filtering is the stdlib logger's job; this wrapper adds exc_info to .exception()
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        context_class=dict,
        cache_logger_on_first_use=True,
    )


def get_logger(name: str = "handoffmon", **context: Any) -> Any:
    """Logger for handoffmon's own warnings and errors (JSON lines to stdlib ``name``).

    Example:
        >>> log = get_logger("handoffmon.stores", backend="redis")
        >>> log_error(log, "store_failed", "attribution", OSError("timeout"), conversation_id="c1")
    """
    return make_logger(name).bind(**context)


def error_fields(exc: BaseException) -> dict[str, str]:
    """``error_type`` and a truncated ``error`` message (never a traceback with locals)."""
    return {"error_type": type(exc).__name__, "error": str(exc)[:_MAX_ERROR_CHARS]}


def log_error(logger: Any, event: str, stage: str, exc: BaseException, **context: Any) -> None:
    """Log one of handoffmon's own failures with its stage and context; never raises.

    Args:
        logger: from ``get_logger``.
        event: short snake_case event name, e.g. ``export_failed``.
        stage: the monitoring stage (same values as ``handoffmon_monitor_errors_total``).
        exc: the exception.
        **context: ids and numbers only (conversation id, rule, model) — never content.
    """
    try:
        logger.error(event, stage=stage, **error_fields(exc), **context)
    except Exception:  # logging must not take the monitor down
        logging.getLogger("handoffmon").error("%s in stage %s (log_error failed)", event, stage)


def turn_fields(result: TurnResult) -> dict[str, Any]:
    """The per-turn log event's fields: ids, depth, models, verdicts, timings. No content; names
    cut by ``clip``."""
    ctx, rec = result.context, result.record
    handoff = None if rec.handoff is None else bool(rec.handoff)
    failed = [c.rule for c in result.checks if c.verdict in ("fail", "error")]
    return {
        "conversation_id": clip(ctx.conversation_id, MAX_ID_CHARS),
        "conversation_id_source": ctx.conversation_id_source,
        "depth": ctx.depth,
        "depth_bucket": result.depth_bucket,
        "model": clip(rec.author),
        "authors": [clip(a) for a in rec.authors],
        "prefix_model": clip(ctx.prefix_model),
        "prefix_purity": round(ctx.prefix_purity, 4),
        "prefix_authors": ctx.prefix_authors,
        "handoff": handoff,
        "requested_model": clip(rec.requested_model or ctx.requested_model),
        "deployment_id": clip(rec.deployment_id),
        "fallbacks": rec.fallbacks,
        "retries": rec.retries,
        "streamed": rec.streamed,
        "latency_ms": round(rec.latency_s * 1000.0, 3),
        "check_ms": round(sum(c.duration_s for c in result.checks) * 1000.0, 3),
        "history_chars": ctx.history_chars,
        "history_tokens": ctx.history_tokens,
        "reply_chars": rec.reply_chars,
        "input_tokens": rec.input_tokens,
        "output_tokens": rec.output_tokens,
        "finish_reason": clip(rec.finish_reason),
        "verdicts": {c.rule: c.verdict for c in result.checks},
        "failed": failed,
        "reasons": {c.rule: c.reason for c in result.checks if c.verdict in ("fail", "error") and c.reason},
        "attributions": dict(Counter(result.attribution_methods)),
    }


class StructlogExporter:
    """Writes one structured event per turn (``handoffmon.turn``).

    Args:
        logger: where events go: a structlog logger the application configured (used as
            is), a stdlib ``logging.Logger`` (wrapped with our processors), or None for
            the stdlib logger ``handoffmon.turns``.
        fmt: ``json`` or ``console`` rendering (ignored for a structlog ``logger``).
        stream: write straight to this text stream instead of stdlib logging.
    """

    def __init__(self, logger: Any = None, *, fmt: LogFormat = "json", stream: TextIO | None = None) -> None:
        self._stdlib: logging.Logger | None = None
        if stream is not None:
            self._log = make_logger(fmt=fmt, stream=stream)
        elif logger is None or isinstance(logger, logging.Logger):
            self._stdlib = logger or logging.getLogger("handoffmon.turns")
            self._log = make_logger(self._stdlib.name, fmt=fmt)
        else:
            self._log = logger
        self._errors = get_logger("handoffmon.exporters")

    def export(self, result: TurnResult) -> bool:
        """Log the turn; returns False (and logs why) on failure, never raises."""
        if self._stdlib is not None and not self._stdlib.isEnabledFor(logging.INFO):
            return True
        try:
            self._log.info(TURN_EVENT, **turn_fields(result))
            return True
        except Exception as exc:
            log_error(self._errors, "export_failed", "export_log", exc)
            return False

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Nothing is buffered here (handlers flush themselves)."""
        return True

    def shutdown(self) -> None:
        """Nothing to release."""
