"""Files the commands read and write: a clear ``error:`` line and exit 1, never a traceback.

Outputs are checked before any work starts (:func:`check_writable`), so an eval run, a refit
against Prometheus or an IFEval scoring is not done only to fail at the last step; writes go
through a temp file and a rename (:func:`write_text_atomic`), so a failed write leaves no
half file behind.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import click

from handoffmon.errors import InputError


def check_writable(path: str | None, option: str) -> None:
    """Raise ``InputError`` naming ``option`` and ``path`` when ``path`` cannot be written:
    it is a directory, its directory does not exist (or is no directory) or is not writable.
    ``None`` and ``-`` (stdout) pass."""
    if not path or path == "-":
        return
    target = Path(path)
    if target.is_dir():
        raise InputError(f"{option} {path}: is a directory, not a file")
    parent = target.parent
    if not parent.exists():
        raise InputError(f"{option} {path}: directory {str(parent)!r} does not exist")
    if not parent.is_dir():
        raise InputError(f"{option} {path}: {str(parent)!r} is not a directory")
    try:  # a real file, not os.access: root passes every access check, /proc refuses files
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".handoffmon-", suffix=".probe"):
            pass
    except OSError as exc:
        raise InputError(
            f"{option} {path}: directory {str(parent)!r} is not writable ({exc.strerror or exc})"
        ) from exc
    if target.exists() and not os.access(target, os.W_OK):
        raise InputError(f"{option} {path}: file is not writable")


def one_stdout(*outputs: tuple[str, str | None]) -> None:
    """``click.UsageError`` when more than one of (option, path) ``outputs`` is ``-``: stdout
    carries one document (JSON, then a CSV or a page after it, parses as neither)."""
    on = [option for option, path in outputs if path == "-"]
    if len(on) > 1:
        raise click.UsageError(f"{' and '.join(on)} cannot all be '-': stdout carries one output")


def replace_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temp file of this writer's own and a rename.

    The temp file is named for this process (``.<name>.<pid>.<random>.tmp`` beside ``path``)
    and created exclusively: two writers of one path (overlapping refit jobs, say) each rename
    a whole file of their own, the last one winning, instead of truncating each other's temp
    file mid-write. It is created with the umask's permissions, as the file itself would be.
    Text that is not valid UTF-8 (lone surrogates) is written as its backslash escape.

    Raises:
        OSError: the file cannot be written; no temp file is left.
    """
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        # a lone surrogate (a name read from JSON "\ud800") is written as its escape, as
        # labels are: strict UTF-8 raised and left the temp file behind
        with open(tmp, "x", encoding="utf-8", errors="backslashreplace") as f:
            f.write(text)
        tmp.replace(target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


@contextlib.contextmanager
def open_atomic(path: str) -> Iterator[TextIO]:
    """A text file to stream into, renamed over ``path`` when the block ends without an error.

    The temp file is :func:`replace_text`'s (this writer's own, beside ``path``); an error in
    the block or in the write removes it and leaves ``path`` as it was.

    Raises:
        InputError: the file cannot be written (naming it and why).
    """
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8", errors="backslashreplace") as f:
            yield f
        tmp.replace(target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        # the temp file's own errors (a full disk); an input file's carry its own name
        if isinstance(exc, OSError) and exc.filename in (None, str(tmp)):
            raise InputError(f"{path}: cannot write: {exc.strerror or exc}") from exc
        raise


def write_text_atomic(path: str, text: str) -> None:
    """Write ``text`` and a newline to ``path`` via :func:`replace_text` (``-`` = stdout).

    Raises:
        InputError: the file cannot be written (naming it and why); no temp file is left.
    """
    if path == "-":
        click.echo(text)
        return
    try:
        replace_text(path, text + "\n")
    except OSError as exc:
        raise InputError(f"{path}: cannot write: {exc.strerror or exc}") from exc
