"""Stream wrappers: yield chunks unchanged, fold them (``ingress.ChunkFolder``), report once at the end."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from handoffmon.ingress import ChunkFolder, StreamOutcome

_log = logging.getLogger("handoffmon.integrations")


OnDone = Callable[[StreamOutcome, Any], None]
"""Called once when a stream ends: (outcome, the wrapped stream object)."""


class _Base:
    """Shared state: the wrapped stream, the chunk folder and the one-shot completion callback."""

    def __init__(self, inner: Any, on_done: OnDone) -> None:
        self._inner = inner
        self._folder = ChunkFolder()
        self._on_done: OnDone | None = on_done

    def _feed(self, chunk: Any) -> None:
        self._folder.feed(chunk)  # total: never raises into the application's stream

    def _done(self, completed: bool) -> None:
        cb, self._on_done = self._on_done, None
        if cb is None:
            return
        try:
            cb(self._folder.outcome(completed=completed), self._inner)
        except Exception:
            _log.warning("handoffmon stream completion failed", exc_info=True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __del__(self) -> None:  # consumer dropped the stream without closing it
        if getattr(self, "_on_done", None) is not None:
            self._done(False)


class SyncStream(_Base):
    """Yields the wrapped stream's chunks unchanged; reports when it ends or is cut off."""

    def __init__(self, inner: Any, on_done: OnDone) -> None:
        super().__init__(inner, on_done)
        plain = hasattr(inner, "__iter__") and not hasattr(inner, "__next__")
        self._it = iter(inner) if plain else inner

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        try:
            chunk = next(self._it)
        except StopIteration:
            self._done(True)
            raise
        except BaseException:
            self._done(False)
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

    def __init__(self, inner: Any, on_done: OnDone) -> None:
        super().__init__(inner, on_done)
        plain = hasattr(inner, "__aiter__") and not hasattr(inner, "__anext__")
        self._it = inner.__aiter__() if plain else inner

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        try:
            chunk = await self._it.__anext__()
        except StopAsyncIteration:
            self._done(True)
            raise
        except BaseException:
            self._done(False)
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
