"""The exception hierarchy: one ``HandoffmonError`` base for everything handoffmon raises."""

from __future__ import annotations

from typing import Any


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


def json_shown(value: Any) -> str:
    """A value of a JSON document as the document has it (``null``, ``true``), cut to 40
    characters: for the errors of the readers of handoffmon's documents."""
    if value is None or isinstance(value, bool):
        return "null" if value is None else str(value).lower()
    text = repr(value)
    return f"{text[:40]}…" if len(text) > 40 else text


def json_got(value: Any) -> str:
    """What a JSON value is, for "expected …, got …": ``null``, or its kind and value
    (``a string 'high'``, ``a number 3``, ``a list [1, 2]``)."""
    if value is None:
        return "null"
    kind = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number"
    )
    return f"{kind} {json_shown(value)}"


class DuplicateKey(ValueError):
    """A key given twice in one JSON object (``json.loads`` would keep the last silently)."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"key {key[:80]!r} given twice in one object: keep one")


def unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` of ``json.loads`` refusing a repeated key (``DuplicateKey``): a
    hand-edited document with a second, pasted ``"rules"`` list was read as the second only."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


def parse_json_document(text: str, source: str) -> Any:
    """``json.loads(text)`` for a JSON file a command was given: ``InputError`` naming ``source``
    and the line and column of a syntax error, the key given twice in one object
    (``unique_object``), or a nesting too deep to parse (the parser recurses per level)."""
    import json

    try:
        return json.loads(text, object_pairs_hook=unique_object)
    except json.JSONDecodeError as exc:
        raise InputError(f"{source}: line {exc.lineno}, column {exc.colno}: {exc.msg}") from exc
    except DuplicateKey as exc:
        raise InputError(f"{source}: {exc}") from exc
    except RecursionError:
        raise InputError(f"{source}: nested too deeply to read (thousands of levels)") from None
