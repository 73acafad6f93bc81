"""LiteLLM Proxy callback: register ``handoffmon.integrations.litellm_callback.handoffmon_callback``.

In the proxy's ``config.yaml``::

    litellm_settings:
      callbacks: ["handoffmon.integrations.litellm_callback.handoffmon_callback"]

and point ``HANDOFFMON_CONFIG`` at a handoffmon config file (optional). The proxy
imports this module by name and uses the module-level instance, which builds its
:class:`~handoffmon.pipeline.monitor.Monitor` on first use.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

from handoffmon._extras import requires_extra

with requires_extra("litellm", "the LiteLLM Proxy callback"):
    from litellm.integrations.custom_logger import CustomLogger

from handoffmon.config import HandoffmonConfig, load_config
from handoffmon.integrations.authorship import (
    finish_from_response,
    first_message,
    raw_author,
    served_by_response,
)
from handoffmon.integrations.streaming import StreamAccumulator, StreamOutcome
from handoffmon.pipeline.monitor import Monitor
from handoffmon.pipeline.turn import TurnHandle

_log = logging.getLogger("handoffmon.integrations")

MAX_IN_FLIGHT = 100_000
"""Bound on remembered call start times (entries of calls that failed are evicted oldest first)."""


def _proxy_headers(data: Mapping[str, Any]) -> Mapping[str, str] | None:
    """Request headers the proxy keeps with the request data."""
    psr = data.get("proxy_server_request")
    if isinstance(psr, Mapping) and isinstance(psr.get("headers"), Mapping):
        return psr["headers"]  # type: ignore[no-any-return]
    meta = data.get("metadata")
    if isinstance(meta, Mapping) and isinstance(meta.get("headers"), Mapping):
        return meta["headers"]  # type: ignore[no-any-return]
    return None


def _proxy_metadata(data: Mapping[str, Any]) -> dict[str, Any]:
    """The caller's metadata (``metadata`` / ``litellm_metadata``) plus ``litellm_session_id``."""
    out: dict[str, Any] = {}
    for key in ("litellm_metadata", "metadata"):
        meta = data.get(key)
        if isinstance(meta, Mapping):
            user_meta = meta.get("requester_metadata")
            if isinstance(user_meta, Mapping):
                out.update(user_meta)
            for k in ("handoffmon", "tags", "route", "conversation_id", "session_id"):
                if k in meta and k not in out:
                    out[k] = meta[k]
    if data.get("litellm_session_id") is not None:
        out.setdefault("litellm_session_id", data["litellm_session_id"])
    return out


class HandoffmonCallback(CustomLogger):  # type: ignore[misc]
    """Monitors every chat completion a LiteLLM Proxy serves.

    Non-streamed replies are handled in ``async_post_call_success_hook`` and streamed ones
    in ``async_post_call_streaming_iterator_hook`` (chunks pass through unchanged; the
    turn is finished when the stream ends or is cut off). Both run before the client has
    the whole reply, so the next turn of the conversation can always attribute it.

    Args:
        config: configuration; ``None`` loads ``$HANDOFFMON_CONFIG`` (and ``HANDOFFMON_*``
            env) when the monitor is first needed.
        monitor: an existing monitor (overrides ``config``).
        monitor_factory: builds the monitor lazily (tests inject one).
    """

    def __init__(
        self,
        config: HandoffmonConfig | None = None,
        *,
        monitor: Monitor | None = None,
        monitor_factory: Callable[[], Monitor] | None = None,
    ) -> None:
        super().__init__()
        self._config = config
        self._monitor = monitor
        self._factory = monitor_factory
        self._lock = threading.Lock()
        self._starts: OrderedDict[str, float] = OrderedDict()  # litellm_call_id -> monotonic start

    @property
    def monitor(self) -> Monitor:
        """The monitor, built on first use."""
        m = self._monitor
        if m is None:
            with self._lock:
                if self._monitor is None:
                    if self._factory is not None:
                        self._monitor = self._factory()
                    else:
                        self._monitor = Monitor(self._config if self._config is not None else load_config())
                m = self._monitor
        return m

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: Any
    ) -> None:
        """Note when the proxy started the call (for the turn's latency); changes nothing."""
        call_id = data.get("litellm_call_id")
        if isinstance(call_id, str):
            self._starts[call_id] = time.monotonic()
            while len(self._starts) > MAX_IN_FLIGHT:  # calls that never finished
                self._starts.popitem(last=False)

    def _latency(self, data: Mapping[str, Any]) -> float | None:
        call_id = data.get("litellm_call_id")
        start = self._starts.pop(call_id, None) if isinstance(call_id, str) else None
        return None if start is None else time.monotonic() - start

    def _begin(self, data: Mapping[str, Any]) -> TurnHandle | None:
        messages = data.get("messages")
        if not isinstance(messages, list):
            return None  # not a chat completion (embeddings, responses, ...)
        try:
            return self.monitor.capture(
                messages,
                requested_model=data.get("model") if isinstance(data.get("model"), str) else None,
                metadata=_proxy_metadata(data),
                headers=_proxy_headers(data),
            )
        except Exception:
            _log.warning("handoffmon could not start a proxy turn", exc_info=True)
            return None

    async def async_post_call_success_hook(
        self, data: dict[str, Any], user_api_key_dict: Any, response: Any
    ) -> Any:
        """A non-streamed chat completion finished: attribute, record and queue it."""
        ctx = self._begin(data)
        if ctx is None or first_message(response) is None:
            return None
        try:
            finish_from_response(
                self.monitor, ctx, response, served_by_response(response), latency_s=self._latency(data)
            )
        except Exception:
            _log.warning("handoffmon could not read a proxy response", exc_info=True)
            self.monitor.count_error("integration")
        return None

    async def async_post_call_streaming_iterator_hook(
        self, user_api_key_dict: Any, response: Any, request_data: dict[str, Any]
    ) -> AsyncGenerator[Any, None]:
        """Pass a streamed reply through unchanged; finish the turn when it ends or is cut off."""
        ctx = self._begin(request_data)
        acc = StreamAccumulator()
        completed = False
        try:
            async for chunk in response:
                try:
                    acc.feed(chunk)
                except Exception:
                    _log.debug("handoffmon could not read a chunk", exc_info=True)
                yield chunk
            completed = True
        finally:
            if ctx is not None:
                self._stream_done(ctx, request_data, response, acc.outcome(completed=completed))

    def _stream_done(self, ctx: TurnHandle, data: Mapping[str, Any], stream: Any, out: StreamOutcome) -> None:
        try:
            served = served_by_response(stream)
            ids = out.deployment_ids or ((served.deployment_id,) if served.deployment_id else ())
            authors = [
                a
                for a in (
                    raw_author(self.monitor.names, d, _deployment_model(d) or served.model_name) for d in ids
                )
                if a
            ]
            self.monitor.finish(
                ctx,
                out.reply,
                authors=authors,
                deployment_id=ids[-1] if ids else None,
                fallbacks=served.fallbacks,
                retries=served.retries,
                streamed=True,
                latency_s=self._latency(data),
                input_tokens=out.input_tokens,
                output_tokens=out.output_tokens,
                finish_reason=out.finish_reason,
                provider=served.provider,
                response_model=out.response_model,
            )
        except Exception:
            _log.warning("handoffmon could not finish a proxy stream", exc_info=True)
            self.monitor.count_error("integration")


def _deployment_model(deployment_id: str) -> str | None:
    """Provider model string of a proxy deployment (the proxy's router), if it can be found."""
    try:
        from litellm.proxy.proxy_server import llm_router
    except Exception:
        return None
    if llm_router is None:
        return None
    try:
        dep = llm_router.get_deployment(model_id=deployment_id)
    except Exception:
        return None
    model = getattr(getattr(dep, "litellm_params", None), "model", None)
    return model if isinstance(model, str) else None


handoffmon_callback = HandoffmonCallback()
"""The instance LiteLLM Proxy's ``config.yaml`` names (``callbacks: [...handoffmon_callback]``)."""
