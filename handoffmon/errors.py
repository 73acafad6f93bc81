"""The exception hierarchy: one ``HandoffmonError`` base for everything handoffmon raises."""

from __future__ import annotations


class HandoffmonError(Exception):
    """Base class of every error handoffmon raises on purpose."""


class ConfigError(HandoffmonError):
    """Configuration is invalid; the message names the key and the file."""

    def __init__(self, message: str, *, key: str | None = None, source: str | None = None) -> None:
        self.key = key
        self.source = source
        where = []
        if source:
            where.append(source)
        if key:
            where.append(f"key {key!r}")
        super().__init__(f"{': '.join(where)}: {message}" if where else message)


class RuleError(ConfigError):
    """A rule (from config or request metadata) is invalid: unknown checker, bad params."""


class StoreError(HandoffmonError):
    """An attribution or aggregate store failed (translated from the backend's error)."""


class CheckerTimeout(HandoffmonError):
    """A checker exceeded its time budget."""


class InputError(HandoffmonError):
    """Input a command was given is malformed (file, column, JSON line)."""


class NoDataError(HandoffmonError):
    """A command's input turned out empty (no counts, no rows for a model, nothing compared).

    Empty results are errors, never a silent success: the CLI exits with
    ``ExitCode.NO_DATA`` (``handoffmon.cli.exits``).
    """
