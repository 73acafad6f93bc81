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
    """An attribution or aggregate store failed (translated from the backend's error).

    ``kind`` is the ``handoffmon_store_failures_total{kind}`` label the store guard counts
    it under.
    """

    kind = "errors"


class StoreTimeout(StoreError):
    """The store did not answer in time (Redis past ``store.timeout_s``, SQLite busy past its wait)."""

    kind = "timeouts"


class StoreSkipped(StoreError):
    """The store guard did not call the backend: it is backing off after repeated failures."""

    kind = "skipped"


class CorruptValue(StoreError):
    """The store answered, but some values could not be decoded.

    Attributes:
        partial: the answer with the unreadable values as ``None`` (a list for
            ``get_many``, ``None`` for ``get_state``); the store guard returns it.
        op: the operation whose values were unreadable when a call serves several
            (``get_state`` for the state a merge call also read); the guard counts it there.
    """

    kind = "corrupt"

    def __init__(self, message: str, *, partial: object = None, op: str | None = None) -> None:
        super().__init__(message)
        self.partial = partial
        self.op = op


class MissingExtraError(HandoffmonError, ImportError):
    """An optional dependency is not installed; the message names the extra that provides it."""


class CheckerTimeout(HandoffmonError):
    """A checker exceeded its time budget."""


class InputError(HandoffmonError):
    """Input a command was given is malformed (file, column, JSON line)."""


class NoDataError(HandoffmonError):
    """A command's input turned out empty (no counts, no rows for a model, nothing compared).

    Empty results are errors, never a silent success: the CLI exits with
    ``ExitCode.NO_DATA`` (``handoffmon.cli.exits``).
    """
