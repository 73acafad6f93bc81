"""Stream wrappers: yield chunks unchanged, fold them (``ingress.ChunkFolder``, or a Responses or
Messages API event folder), report once at the end. An exception the stream raised is told to
the folder (``Folder.raised``), whose outcome says what it made of it (an upstream error
before any text of an event stream: ``no_reply`` ``error``), as in every other adapter.

A stream the application drops without closing is reported from its finalizer, and a
finalizer may run in any thread at any allocation, including inside a monitor lock that
thread already holds (the cyclic collector runs finalizers wherever it is triggered). So
the finalizer does one thing only: ``SimpleQueue.put`` (C, reentrant, lock-free) of the
report onto :data:`_FINALIZED`. The report itself (``on_done``: counting, ``finish``) runs
later on a normal stack: on the ``handoffmon-stream-finalizer`` thread, or at the start of
the next wrapped call (:func:`drain_finalized`), whichever comes first. Reports are only
taken off the queue under ``_reporting`` (the finalizer thread is woken by a token on a queue
of its own, ``_WAKE``), so :func:`settle` (``Runtime.flush`` and ``close``), holding it,
knows every stream dropped before it was reported.
"""

from __future__ import annotations

import copy
import logging
import os
import pickle
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, SupportsIndex

from handoffmon.ingress import ChunkFolder, StreamOutcome
from handoffmon.ingress.chunks import Folder
from handoffmon.pipeline import fork

_log = logging.getLogger("handoffmon.integrations")


OnDone = Callable[[StreamOutcome, Any], None]
"""Called once when a stream ends: (outcome, the wrapped stream object)."""

_FINALIZED: queue.SimpleQueue[tuple[OnDone, Folder, Any]] = queue.SimpleQueue()
"""Reports of dropped streams, put by finalizers (the only thing a finalizer does)."""
_drainer_pid: int | None = None
_drainer_lock = threading.Lock()  # taken on normal stacks only (stream construction), never by a finalizer
_WAKE: queue.SimpleQueue[None] = queue.SimpleQueue()
"""One token per report put on :data:`_FINALIZED`: wakes the finalizer thread."""
_reporting = threading.RLock()
"""Held by whoever takes reports off :data:`_FINALIZED` (normal stacks only, never a finalizer)."""


def _after_fork() -> int:
    """In a forked child (``pipeline.fork``): the parent's reports are its own (fresh queues);
    the finalizer thread starts again with the child's first stream (``_ensure_drainer``)."""
    global _FINALIZED, _WAKE
    dropped = _FINALIZED.qsize()
    _FINALIZED, _WAKE = queue.SimpleQueue(), queue.SimpleQueue()
    fork.renew_locks((_reporting, _drainer_lock))
    return dropped


fork.on_fork(_after_fork)


def _report(
    cb: OnDone, folder: Folder, inner: Any, completed: bool, error: BaseException | None = None
) -> None:
    try:
        if error is not None:
            folder.raised(error)
        cb(folder.outcome(completed=completed), inner)
    except Exception:
        _log.warning("handoffmon stream completion failed", exc_info=True)


def drain_finalized() -> int:
    """Report the streams dropped since the last drain, on this (normal) stack; returns how many.

    Never raises. The wrappers call it at the start of every call (a report another thread is
    making is waited for, so a dropped stream's turn is queued before the call's), and the
    finalizer thread whenever a report arrives.
    """
    if _FINALIZED.empty():  # the usual: nothing dropped, no lock taken
        return 0
    with _reporting:
        return _drain()


def _drain() -> int:
    n = 0
    while True:
        try:
            cb, folder, inner = _FINALIZED.get_nowait()
        except queue.Empty:
            return n
        _report(cb, folder, inner, completed=False)
        n += 1


def settle(timeout_s: float | None = None) -> bool:
    """Report every stream dropped so far, waiting for a report another thread is making
    (``Runtime.flush`` and ``close``: the turn of a stream the application dropped is queued
    by the time they look); False when another thread's report outlasted ``timeout_s``.
    Never raises."""
    if not _reporting.acquire(timeout=-1 if timeout_s is None else max(0.0, timeout_s)):
        return False
    try:
        _drain()
    finally:
        _reporting.release()
    return True


def _drain_forever() -> None:
    while True:
        _WAKE.get()
        with _reporting:
            _drain()


def _ensure_drainer() -> None:
    """Start the finalizer thread once per process (again in a forked child)."""
    global _drainer_pid
    pid = os.getpid()
    if _drainer_pid == pid:
        return
    with _drainer_lock:
        if _drainer_pid == pid:
            return
        threading.Thread(target=_drain_forever, name="handoffmon-stream-finalizer", daemon=True).start()
        _drainer_pid = pid


class _Turn:
    """The turn a stream (and its copies) reports: the folder its chunks go to, the wrapped stream
    the report names, and the one-shot callback, in a one-element list that deep copies share
    (``list.pop`` is atomic and lock-free, so a finalizer may take it). When the last copy
    reading it is dropped with the turn unreported, it hands the report over (module docstring)."""

    __slots__ = ("folder", "inner", "once")

    def __init__(self, folder: Folder, inner: Any, once: list[OnDone]) -> None:
        self.folder, self.inner, self.once = folder, inner, once

    def take(self) -> OnDone | None:
        try:
            return self.once.pop()
        except IndexError:
            return None

    def done(self, completed: bool, error: BaseException | None = None) -> None:
        cb = self.take()
        if cb is not None:
            _report(cb, self.folder, self.inner, completed, error)

    def __del__(self) -> None:
        """Every copy of the stream was dropped without closing it: hand the report over, nothing
        else. No lock, no logging, no callback here (see the module docstring): a ``put`` on a
        ``SimpleQueue`` is safe even when this thread is inside ``put`` or holds any lock."""
        cb = self.take()
        if cb is not None:
            _FINALIZED.put((cb, self.folder, self.inner))
            _WAKE.put(None)


class _Base:
    """Shared state: the wrapped stream, what it is read through (``_it``) and its :class:`_Turn`
    (the folder, default a ``ChunkFolder``, and the one-shot completion callback).

    Copies behave as the wrapped stream's (a stream's ``copy.copy`` shares its connection; its
    ``deepcopy`` and ``pickle`` raise, as the SDKs' and LiteLLM's do) and report the turn once:
    a shallow copy shares the turn (the chunks either copy yields go to one folder), a deep copy
    of a stream that allows one is a second reading of it (its own folder, copied) whose turn is
    reported by whichever reading ends (or is dropped) first.
    """

    def __init__(self, inner: Any, on_done: OnDone, folder: Folder | None = None) -> None:
        self._inner = inner
        self._it: Any = inner
        self._turn = _Turn(folder if folder is not None else ChunkFolder(), inner, [on_done])
        _ensure_drainer()

    def _feed(self, chunk: Any) -> None:
        self._turn.folder.feed(chunk)  # total: never raises into the application's stream

    def _done(self, completed: bool, error: BaseException | None = None) -> None:
        self._turn.done(completed, error)

    def __getattr__(self, name: str) -> Any:
        try:  # read from __dict__: an instance made without __init__ has no _inner (no recursion)
            inner = self.__dict__["_inner"]
        except KeyError:
            raise AttributeError(name) from None
        return getattr(inner, name)

    def __copy__(self) -> Any:
        inner = copy.copy(self._inner)  # the stream's own error when it cannot be copied
        return self._copied(inner, inner if self._it is self._inner else self._it, self._turn)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        inner = copy.deepcopy(self._inner, memo)
        it = inner if self._it is self._inner else copy.deepcopy(self._it, memo)
        turn = self._turn
        return self._copied(inner, it, _Turn(copy.deepcopy(turn.folder, memo), inner, turn.once))

    def _copied(self, inner: Any, it: Any, turn: _Turn) -> Any:
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new._inner, new._it, new._turn = inner, it, turn
        return new

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        pickle.dumps(self._inner, int(protocol))  # the stream's own error when it cannot be pickled
        raise TypeError(f"cannot pickle {type(self).__name__!r} object: its turn is reported in this process")


class SyncStream(_Base):
    """Yields the wrapped stream's chunks unchanged; reports when it ends or is cut off."""

    def __init__(self, inner: Any, on_done: OnDone, folder: Folder | None = None) -> None:
        super().__init__(inner, on_done, folder)
        if hasattr(inner, "__iter__") and not hasattr(inner, "__next__"):  # a plain iterable
            self._it = iter(inner)

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        try:
            chunk = next(self._it)
        except StopIteration:
            self._done(True)
            raise
        except BaseException as exc:
            self._done(False, exc)
            raise
        self._feed(chunk)
        return chunk

    def close(self) -> None:
        """Close the wrapped stream; a stream closed early is reported as cut off."""
        try:
            closer = getattr(self._inner, "close", None)
            if callable(closer):
                closer()
        finally:
            self._done(False)

    def __enter__(self) -> SyncStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncStream(_Base):
    """Async twin of :class:`SyncStream`."""

    def __init__(self, inner: Any, on_done: OnDone, folder: Folder | None = None) -> None:
        super().__init__(inner, on_done, folder)
        if hasattr(inner, "__aiter__") and not hasattr(inner, "__anext__"):  # a plain async iterable
            self._it = inner.__aiter__()

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        try:
            chunk = await self._it.__anext__()
        except StopAsyncIteration:
            self._done(True)
            raise
        except BaseException as exc:
            self._done(False, exc)
            raise
        self._feed(chunk)
        return chunk

    async def aclose(self) -> None:
        """Close the wrapped stream; a stream closed early is reported as cut off."""
        try:
            closer = getattr(self._inner, "aclose", None) or getattr(self._inner, "close", None)
            if callable(closer):
                res = closer()
                if hasattr(res, "__await__"):
                    await res
        finally:
            self._done(False)

    async def close(self) -> None:
        """Alias of :meth:`aclose` (the OpenAI SDK's ``AsyncStream.close``)."""
        await self.aclose()

    async def __aenter__(self) -> AsyncStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
