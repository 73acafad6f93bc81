"""Streamed replies: accumulate chunks (text, tool calls, per-chunk deployment) and report once at the end."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from handoffmon.integrations.authorship import hidden_params

_log = logging.getLogger("handoffmon.integrations")


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


@dataclass(frozen=True, slots=True)
class StreamOutcome:
    """A finished (or cut-off) stream.

    Attributes:
        reply: the assistant message as a client would resend it (``role``, ``content``,
            ``tool_calls``), for recording and checking.
        deployment_ids: deployment ids that produced content, in order, consecutive
            duplicates merged (two for a mid-stream fallback continuation).
        response_model: last model string a chunk reported.
        finish_reason: last finish reason seen.
        input_tokens: usage from the final chunk, when sent.
        output_tokens: usage from the final chunk, when sent.
        completed: the stream ended normally (False = error or the consumer stopped early).
        chunks: number of chunks seen.
    """

    reply: dict[str, Any]
    deployment_ids: tuple[str, ...]
    response_model: str | None
    finish_reason: str | None
    input_tokens: int | None
    output_tokens: int | None
    completed: bool
    chunks: int


class StreamAccumulator:
    """Folds chat-completion chunks (OpenAI or LiteLLM shape) into one reply."""

    __slots__ = ("_finish", "_ids", "_in", "_model", "_n", "_out", "_text", "_tools")

    def __init__(self) -> None:
        self._text: list[str] = []
        self._tools: dict[int, dict[str, Any]] = {}
        self._ids: list[str] = []
        self._model: str | None = None
        self._finish: str | None = None
        self._in: int | None = None
        self._out: int | None = None
        self._n = 0

    def feed(self, chunk: Any) -> None:
        """Take one chunk; never raises on odd shapes."""
        self._n += 1
        model = _get(chunk, "model")
        if isinstance(model, str) and model:
            self._model = model
        usage = _get(chunk, "usage")
        if usage is not None:
            pt, ct = _get(usage, "prompt_tokens"), _get(usage, "completion_tokens")
            self._in = pt if isinstance(pt, int) else self._in
            self._out = ct if isinstance(ct, int) else self._out
        choices = _get(chunk, "choices") or ()
        if not choices:
            return
        choice = choices[0]
        finish = _get(choice, "finish_reason")
        if isinstance(finish, str):
            self._finish = finish
        delta = _get(choice, "delta")
        if delta is None:
            return
        produced = self._take_delta(delta)
        if produced:
            dep = hidden_params(chunk).get("model_id")
            if isinstance(dep, str) and dep and (not self._ids or self._ids[-1] != dep):
                self._ids.append(dep)

    def _take_delta(self, delta: Any) -> bool:
        produced = False
        content = _get(delta, "content")
        if isinstance(content, str) and content:
            self._text.append(content)
            produced = True
        for call in _get(delta, "tool_calls") or ():
            produced = True
            idx = _get(call, "index")
            slot = self._tools.setdefault(idx if isinstance(idx, int) else len(self._tools), {})
            if _get(call, "id"):
                slot["id"] = _get(call, "id")
            fn = _get(call, "function")
            if fn is not None:
                if _get(fn, "name"):
                    slot["name"] = _get(fn, "name")
                args = _get(fn, "arguments")
                if isinstance(args, str):
                    slot["arguments"] = slot.get("arguments", "") + args
        return produced

    def outcome(self, *, completed: bool) -> StreamOutcome:
        """The accumulated reply."""
        reply: dict[str, Any] = {"role": "assistant", "content": "".join(self._text) if self._text else None}
        if self._tools:
            reply["tool_calls"] = [
                {
                    "id": t.get("id", ""),
                    "type": "function",
                    "function": {"name": t.get("name", ""), "arguments": t.get("arguments", "")},
                }
                for _, t in sorted(self._tools.items())
            ]
        return StreamOutcome(
            reply=reply,
            deployment_ids=tuple(self._ids),
            response_model=self._model,
            finish_reason=self._finish,
            input_tokens=self._in,
            output_tokens=self._out,
            completed=completed,
            chunks=self._n,
        )


OnDone = Callable[[StreamOutcome, Any], None]
"""Called once when a stream ends: (outcome, the wrapped stream object)."""


class _Base:
    """Shared state: the wrapped stream, the accumulator and the one-shot completion callback."""

    def __init__(self, inner: Any, on_done: OnDone) -> None:
        self._inner = inner
        self._acc = StreamAccumulator()
        self._on_done: OnDone | None = on_done

    def _feed(self, chunk: Any) -> None:
        try:
            self._acc.feed(chunk)
        except Exception:  # accounting must never break the application's stream
            _log.debug("handoffmon could not read a stream chunk", exc_info=True)

    def _done(self, completed: bool) -> None:
        cb, self._on_done = self._on_done, None
        if cb is None:
            return
        try:
            cb(self._acc.outcome(completed=completed), self._inner)
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
