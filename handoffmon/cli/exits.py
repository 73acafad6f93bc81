"""Exit codes of every ``handoffmon`` command, in one place (the docs' table is checked against it).

2 belongs to click (usage errors: unknown option, missing argument) and handoffmon never
uses it for anything else, so a script can tell "I called it wrong" from "it ran and
found something".
"""

from __future__ import annotations

import sys
from enum import IntEnum
from typing import NoReturn

import click


class ExitCode(IntEnum):
    """What a ``handoffmon`` process exit status means (see ``MEANING``)."""

    OK = 0
    ERROR = 1
    USAGE = 2
    FLAGGED = 3
    NO_DATA = 4
    RUN_FAILED = 5


MEANING: dict[ExitCode, str] = {
    ExitCode.OK: "success: the output was written and holds data",
    ExitCode.ERROR: (
        "bad input or configuration (an eval deployment without its provider's key included: not"
        " retried), an unreadable source, an output that could not be written"
    ),
    ExitCode.USAGE: "click's usage error (unknown option, missing argument); never used for anything else",
    ExitCode.FLAGGED: '`eval compare`: at least one (rule, model, checkpoint depth) is flagged "too clean"',
    ExitCode.NO_DATA: (
        "ran, but had nothing to work on: an empty source (e.g. a Prometheus whose targets went "
        "stale), a `--model` with no rows, zero compared cells"
    ),
    ExitCode.RUN_FAILED: (
        "`eval run` / `eval switch-matrix`: some runs failed after their retries (a rerun resumes)"
    ),
}


def fail(message: str, code: ExitCode = ExitCode.ERROR) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code``."""
    click.echo(f"error: {message}", err=True)
    sys.exit(int(code))


def table_markdown() -> str:
    """The exit codes as a Markdown table (the docs carry this table; a test keeps them equal)."""
    rows = [f"| {int(c)} | `{c.name}` | {MEANING[c]} |" for c in ExitCode]
    return "\n".join(["| code | name | meaning |", "| --- | --- | --- |", *rows])
