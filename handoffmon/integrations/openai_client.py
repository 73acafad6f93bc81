"""``wrap(openai.OpenAI | AsyncOpenAI)``: ``chat.completions.create`` monitored, the rest passed through."""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from handoffmon.integrations.authorship import (
    ServedBy,
    finish_from_response,
    raw_author,
    served_by_headers,
)
from handoffmon.integrations.streaming import AsyncStream, StreamOutcome, SyncStream
from handoffmon.pipeline.monitor import Monitor
from handoffmon.pipeline.turn import TurnHandle

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.runtime import Runtime

_log = logging.getLogger("handoffmon.integrations")


def _is_async_client(client: Any) -> bool:
    try:
        import openai
    except ImportError:  # pragma: no cover - duck-typed clients without the SDK
        return type(client).__name__.startswith("Async")
    return isinstance(client, openai.AsyncOpenAI) or type(client).__name__.startswith("Async")


def _call_metadata(kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
    """``metadata`` (OpenAI param) merged with ``extra_body.metadata`` (LiteLLM Proxy style)."""
    out: dict[str, Any] = {}
    body = kwargs.get("extra_body")
    if isinstance(body, Mapping):
        if isinstance(body.get("metadata"), Mapping):
            out.update(body["metadata"])
        if body.get("litellm_session_id") is not None:
            out.setdefault("litellm_session_id", body["litellm_session_id"])
    if isinstance(kwargs.get("metadata"), Mapping):
        out.update(kwargs["metadata"])
    return out or None


class _Turns:
    """Begin/finish plumbing shared by the sync and async ``create``."""

    def __init__(self, monitor: Monitor) -> None:
        self.monitor = monitor

    def begin(self, kwargs: Mapping[str, Any]) -> TurnHandle | None:
        try:
            headers = kwargs.get("extra_headers")
            return self.monitor.capture(
                kwargs.get("messages") or (),
                requested_model=kwargs.get("model"),
                metadata=_call_metadata(kwargs),
                headers=headers if isinstance(headers, Mapping) else None,
            )
        except Exception:
            _log.warning("handoffmon could not start a turn", exc_info=True)
            self.monitor.count_error("integration")
            return None

    def author(self, served: ServedBy, fallback_model: str | None) -> tuple[str, ...]:
        author = raw_author(self.monitor.names, served.deployment_id, served.model_name) or fallback_model
        return (author,) if author else ()

    def finish(self, ctx: TurnHandle, response: Any, headers: Mapping[str, Any] | None, t0: float) -> None:
        try:
            model = getattr(response, "model", None)
            served = served_by_headers(headers, response_model=model if isinstance(model, str) else None)
            finish_from_response(
                self.monitor,
                ctx,
                response,
                served,
                latency_s=time.perf_counter() - t0,
                fallback_author=served.response_model,
            )
        except Exception:
            _log.warning("handoffmon could not read a completion", exc_info=True)
            self.monitor.count_error("integration")

    def stream_done(
        self, ctx: TurnHandle, headers: Mapping[str, Any] | None, t0: float, out: StreamOutcome
    ) -> None:
        try:
            served = served_by_headers(headers, response_model=out.response_model)
            self.monitor.finish(
                ctx,
                out.reply,
                authors=self.author(served, out.response_model),
                deployment_id=served.deployment_id,
                fallbacks=served.fallbacks,
                retries=served.retries,
                streamed=True,
                latency_s=time.perf_counter() - t0,
                input_tokens=out.input_tokens,
                output_tokens=out.output_tokens,
                finish_reason=out.finish_reason,
                response_model=out.response_model,
            )
        except Exception:
            _log.warning("handoffmon could not finish a streamed completion", exc_info=True)
            self.monitor.count_error("integration")


def _raw_create(completions: Any) -> Any:
    """``completions.with_raw_response.create`` when the SDK has it (gives us the headers)."""
    raw = getattr(completions, "with_raw_response", None)
    return getattr(raw, "create", None)


class _SyncCompletions:
    def __init__(self, inner: Any, turns: _Turns) -> None:
        self._inner = inner
        self._turns = turns

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def create(self, **kwargs: Any) -> Any:
        """``chat.completions.create`` monitored; returns exactly what the SDK returns."""
        ctx = self._turns.begin(kwargs)
        t0 = time.perf_counter()
        raw_create = _raw_create(self._inner) if ctx is not None else None
        if raw_create is None:
            response, headers = self._inner.create(**kwargs), None
        else:
            raw = raw_create(**kwargs)
            response, headers = raw.parse(), raw.headers
        if ctx is None:
            return response
        if kwargs.get("stream"):
            return SyncStream(response, lambda out, _i: self._turns.stream_done(ctx, headers, t0, out))
        self._turns.finish(ctx, response, headers, t0)
        return response


class _AsyncCompletions:
    def __init__(self, inner: Any, turns: _Turns) -> None:
        self._inner = inner
        self._turns = turns

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def create(self, **kwargs: Any) -> Any:
        """``chat.completions.create`` monitored; returns exactly what the SDK returns."""
        ctx = self._turns.begin(kwargs)
        t0 = time.perf_counter()
        raw_create = _raw_create(self._inner) if ctx is not None else None
        if raw_create is None:
            response, headers = await self._inner.create(**kwargs), None
        else:
            raw = await raw_create(**kwargs)
            response, headers = raw.parse(), raw.headers
            if inspect.isawaitable(response):  # the non-legacy raw response parses asynchronously
                response = await response
        if ctx is None:
            return response
        if kwargs.get("stream"):
            return AsyncStream(response, lambda out, _i: self._turns.stream_done(ctx, headers, t0, out))
        self._turns.finish(ctx, response, headers, t0)
        return response


class _Chat:
    def __init__(self, inner: Any, completions: Any) -> None:
        self._inner = inner
        self.completions = completions

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class OpenAIClientWrapper:
    """An OpenAI-compatible client with handoffmon around ``chat.completions.create``.

    Authorship comes from LiteLLM response headers when the client talks to a LiteLLM
    Proxy (``x-litellm-model-id``, ``x-litellm-model-name``, attempted fallbacks and
    retries, read through ``with_raw_response``), else from the response's ``model``.

    Args:
        client: ``openai.OpenAI`` or ``openai.AsyncOpenAI`` (or a look-alike).
        monitor: the monitor that records turns.
        runtime: the runtime that owns ``monitor`` (``wrap`` passes it), if any.
    """

    def __init__(self, client: Any, monitor: Monitor, *, runtime: Runtime | None = None) -> None:
        self._client = client
        self._monitor = monitor
        self._runtime = runtime
        turns = _Turns(monitor)
        inner = client.chat.completions
        completions = (
            _AsyncCompletions(inner, turns) if _is_async_client(client) else _SyncCompletions(inner, turns)
        )
        self.chat = _Chat(client.chat, completions)

    @property
    def runtime(self) -> Runtime | None:
        """The runtime owning the monitor (``None`` for a bare monitor)."""
        return self._runtime

    @property
    def monitor(self) -> Monitor:
        """The monitor recording this client's turns."""
        return self._monitor

    @property
    def client(self) -> Any:
        """The wrapped client."""
        return self._client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)
