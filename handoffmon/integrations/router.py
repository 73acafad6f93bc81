"""``wrap(litellm.Router)``: same call surface, each turn attributed and monitored (composition)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from handoffmon.integrations.authorship import (
    finish_from_response,
    raw_author,
    served_by_response,
)
from handoffmon.integrations.streaming import AsyncStream, StreamOutcome, SyncStream
from handoffmon.pipeline.monitor import Monitor
from handoffmon.pipeline.turn import Described, TurnHandle

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.runtime import Runtime

_log = logging.getLogger("handoffmon.integrations")


def request_metadata(kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
    """The metadata handoffmon reads from LiteLLM call kwargs (``metadata`` + ``litellm_session_id``)."""
    meta = kwargs.get("metadata")
    session = kwargs.get("litellm_session_id")
    if session is None and not isinstance(meta, Mapping):
        return None
    out = dict(meta) if isinstance(meta, Mapping) else {}
    if session is not None:
        out.setdefault("litellm_session_id", session)
    return out


def request_headers(kwargs: Mapping[str, Any]) -> Mapping[str, str] | None:
    """Headers the application attached to the call (``extra_headers`` or ``headers``)."""
    h = kwargs.get("extra_headers") or kwargs.get("headers")
    return h if isinstance(h, Mapping) else None


class RouterWrapper:
    """A ``litellm.Router`` with handoffmon around ``completion`` / ``acompletion``.

    Every other attribute passes through to the router. Responses (and streamed chunks)
    are returned unchanged; monitoring failures are counted, never raised. A router
    error propagates unchanged (no reply, so no turn is recorded).

    Args:
        router: the router (or any object with litellm-style ``completion``/``acompletion``).
        monitor: the monitor that records turns.
        runtime: the runtime that owns ``monitor`` (``wrap`` passes it), if any.
    """

    def __init__(self, router: Any, monitor: Monitor, *, runtime: Runtime | None = None) -> None:
        self._router = router
        self._monitor = monitor
        self._runtime = runtime
        self._dep_names: dict[str, str | None] = {}

    @property
    def runtime(self) -> Runtime | None:
        """The runtime owning the monitor (``None`` for a bare monitor)."""
        return self._runtime

    @property
    def monitor(self) -> Monitor:
        """The monitor recording this router's turns."""
        return self._monitor

    @property
    def router(self) -> Any:
        """The wrapped router."""
        return self._router

    def __getattr__(self, name: str) -> Any:
        return getattr(self._router, name)

    # -- calls --------------------------------------------------------------------------

    def completion(self, model: str, messages: list[Any], **kwargs: Any) -> Any:
        """``Router.completion`` with monitoring; ``stream=True`` returns a wrapped iterator."""
        ctx = self._begin(model, messages, kwargs)
        t0 = time.perf_counter()
        response = self._router.completion(model=model, messages=messages, **kwargs)
        if ctx is None:
            return response
        if kwargs.get("stream"):
            return SyncStream(response, lambda out, inner: self._stream_done(ctx, t0, out, inner))
        self._finish(ctx, response, time.perf_counter() - t0)
        return response

    async def acompletion(self, model: str, messages: list[Any], **kwargs: Any) -> Any:
        """``Router.acompletion`` with monitoring; ``stream=True`` returns a wrapped async iterator."""
        ctx = self._begin(model, messages, kwargs)
        t0 = time.perf_counter()
        response = await self._router.acompletion(model=model, messages=messages, **kwargs)
        if ctx is None:
            return response
        if kwargs.get("stream"):
            return AsyncStream(response, lambda out, inner: self._stream_done(ctx, t0, out, inner))
        self._finish(ctx, response, time.perf_counter() - t0)
        return response

    # -- monitoring ---------------------------------------------------------------------

    def _begin(self, model: str, messages: Any, kwargs: Mapping[str, Any]) -> TurnHandle | None:
        try:
            return self._monitor.capture(
                messages,
                requested_model=model,
                metadata=request_metadata(kwargs),
                headers=request_headers(kwargs),
            )
        except Exception:  # Monitor.begin does not raise; this guards the argument plumbing
            _log.warning("handoffmon could not start a turn", exc_info=True)
            self._monitor.count_error("integration")
            return None

    def _finish(self, ctx: TurnHandle, response: Any, latency_s: float) -> None:
        try:
            finish_from_response(self._monitor, ctx, response, None, latency_s=latency_s)
        except Exception:
            _log.warning("handoffmon could not read a router response", exc_info=True)
            self._monitor.count_error("integration")

    def _stream_done(self, ctx: TurnHandle, t0: float, out: StreamOutcome, inner: Any) -> None:
        try:
            self._monitor.finish_described(
                ctx,
                out.reply,
                self._describe_stream,
                (out, inner),
                latency_s=time.perf_counter() - t0,
                streamed=True,
            )
        except Exception:
            _log.warning("handoffmon could not finish a streamed turn", exc_info=True)
            self._monitor.count_error("integration")

    def _describe_stream(self, out: StreamOutcome, inner: Any) -> Described:
        """Who served a finished stream (on the attribution thread for a captured turn).

        A mid-stream fallback gives the turn one author per deployment that produced text.
        """
        served = served_by_response(inner)  # the router repoints these to the fallback
        ids = out.deployment_ids or ((served.deployment_id,) if served.deployment_id else ())
        authors = []
        for dep in ids:
            name = self._deployment_model(dep) or (served.model_name if dep == served.deployment_id else None)
            author = raw_author(self._monitor.names, dep, name)
            if author:
                authors.append(author)
        return Described(
            tuple(authors),
            ids[-1] if ids else served.deployment_id,
            served.fallbacks,
            served.retries,
            served.provider,
            out.response_model or served.response_model,
            out.input_tokens,
            out.output_tokens,
            out.finish_reason,
        )

    def _deployment_model(self, deployment_id: str) -> str | None:
        """The provider model string of a router deployment (cached)."""
        if deployment_id in self._dep_names:
            return self._dep_names[deployment_id]
        name: str | None = None
        try:
            dep = self._router.get_deployment(model_id=deployment_id)
            params = getattr(dep, "litellm_params", None)
            model = getattr(params, "model", None)
            name = model if isinstance(model, str) else None
        except Exception:
            name = None
        if len(self._dep_names) < 10_000:
            self._dep_names[deployment_id] = name
        return name
