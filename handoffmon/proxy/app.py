"""The ``handoffmon serve`` ASGI app: /v1/* pass-through with monitoring, /metrics, /healthz, /readyz."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from handoffmon._extras import requires_extra

with requires_extra("proxy", "handoffmon serve"):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route
    from starlette.types import Receive as AsgiReceive
    from starlette.types import Scope as AsgiScope
    from starlette.types import Send as AsgiSend

from handoffmon.config import HandoffmonConfig
from handoffmon.errors import ConfigError
from handoffmon.exporters.serving import render, token_ok
from handoffmon.ingress.apis import MESSAGES, RESPONSES
from handoffmon.pipeline.worker import ByteBudget
from handoffmon.proxy.background import BackgroundCalls
from handoffmon.proxy.forward import Forwarder, Receive, Scope, Send, error_body, send_json
from handoffmon.proxy.metrics import ProxyMetrics
from handoffmon.proxy.upstream import SessionFactory, Upstream
from handoffmon.routing.body import body_routing
from handoffmon.shadow.turns import ShadowSource

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.runtime import Runtime

_log = logging.getLogger("handoffmon.proxy")

PASSTHROUGH_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
_PASSTHROUGH = frozenset(PASSTHROUGH_METHODS)


class ProxyState:
    """What the routes share: config, runtime (monitor, registry), upstream, readiness."""

    def __init__(
        self, config: HandoffmonConfig, runtime: Runtime, upstream: Upstream, owns_runtime: bool
    ) -> None:
        self.config = config
        self.runtime = runtime
        self.monitor = runtime.monitor
        self.registry = runtime.registry
        self.upstream = upstream
        self.owns_runtime = owns_runtime
        self.ready = False
        self.draining = False
        self.held_bodies = ByteBudget(config.proxy.max_held_body_bytes)
        """Request bodies the monitored routes hold whole (``proxy.max_held_body_bytes``)."""
        self.metrics = ProxyMetrics(runtime.registry, runtime.monitor.queued_bytes, upstream)
        self.renderer = MetricsRenderer(runtime.registry, config.proxy.metrics_render_timeout_s)
        self.admin = ThreadPoolExecutor(1, thread_name_prefix="handoffmon-admin")
        """Runs ``/admin/flush`` waits one at a time, off the default executor (which the
        upstream client's DNS lookups and ``/readyz``'s store ping share): a burst of flushes,
        each waiting up to ``pipeline.shutdown_timeout_s``, held all of its threads."""
        self.background: BackgroundCalls | None = None
        """The Responses forwarder's parked background calls (``_routes``)."""


class MetricsRenderer:
    """Renders ``/metrics`` on one worker thread, never on the event loop, within a time bound.

    With tens of thousands of series a render takes seconds; on the loop it would stall
    every proxied request. One thread renders at a time (a scrape arriving meanwhile
    waits for the running render first); a scrape whose render does not finish within
    ``timeout_s`` gets ``None`` (answered 503) and the render finishes in the background.
    """

    def __init__(self, registry: Any, timeout_s: float) -> None:
        self._registry = registry
        self._timeout = timeout_s
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="handoffmon-metrics")
        self._running: asyncio.Future[Any] | None = None

    async def render(self, accept: str, accept_encoding: str, query: str) -> tuple[Any, ...] | None:
        """``(status, headers, body)`` of :func:`render`, or ``None`` past the time bound."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        try:
            while self._running is not None and not self._running.done():
                await asyncio.wait_for(asyncio.shield(self._running), deadline - loop.time())
            fut = loop.run_in_executor(self._executor, render, self._registry, accept, accept_encoding, query)
            self._running = fut
            result: tuple[Any, ...] = await asyncio.wait_for(asyncio.shield(fut), deadline - loop.time())
        except TimeoutError:
            return None
        return result

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _authorized(state: ProxyState, request: Request) -> bool:
    return token_ok(request.headers.get("authorization"), state.config.telemetry.metrics_token)


def _unauthorized() -> Response:
    body = error_body(
        "bearer token required (telemetry.metrics_token)", "unauthorized", "authentication_error"
    )
    return Response(body, 401, media_type="application/json", headers={"www-authenticate": "Bearer"})


def _state(request: Request) -> ProxyState:
    state: ProxyState = request.app.state.proxy
    return state


async def _healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


READYZ_PROBE_S = 1.0
"""While the store fails open, ``/readyz`` pings it at most this often (no traffic needed to
see it back)."""
READYZ_PROBE_WAIT_S = 0.2
"""How long ``/readyz`` waits for that ping before answering with what it knew (the ping goes on
in a worker thread; the event loop is never blocked)."""


def _store_ok(store: Any) -> bool:
    # failing open from a failed call until one succeeds (not only while the breaker skips)
    return bool(getattr(store, "healthy", True)) and bool(getattr(store, "available", True))


async def _probe_store(request: Request, store: Any) -> None:
    """While the store fails open: ping it off the event loop (one ping at a time, at most
    every ``READYZ_PROBE_S``); a success resets the guard (``GuardedStore.probe``)."""
    probe = getattr(store, "probe", None)
    if not callable(probe):
        return
    app_state = request.app.state
    task: asyncio.Future[Any] | None = getattr(app_state, "store_probe", None)
    loop = asyncio.get_running_loop()
    if task is None or task.done():
        if loop.time() < getattr(app_state, "store_probe_next", 0.0):
            return
        app_state.store_probe_next = loop.time() + READYZ_PROBE_S
        task = app_state.store_probe = asyncio.ensure_future(asyncio.to_thread(probe))
    await asyncio.wait([task], timeout=READYZ_PROBE_WAIT_S)


async def _readyz(request: Request) -> Response:
    state = _state(request)
    store = getattr(state.monitor, "store", None)
    store_ok = _store_ok(store)
    if not store_ok:
        await _probe_store(request, store)
        store_ok = _store_ok(store)
    ready = state.ready and state.upstream.started and not state.draining
    status = "ready" if ready else ("draining" if state.draining else "not_ready")
    body = {"status": status, "store": "ok" if store_ok else "failing_open"}
    return JSONResponse(body, 200 if ready else 503)


async def _metrics(request: Request) -> Response:
    state = _state(request)
    if not _authorized(state, request):
        return _unauthorized()
    # the exporters' renderer: OpenMetrics (with exemplars) when Prometheus asks for it, gzip
    # when accepted, ``?name[]=`` filtering — the same exposition as the library-mode server
    h = request.headers
    out = await state.renderer.render(h.get("accept", ""), h.get("accept-encoding", ""), request.url.query)
    if out is None:
        state.monitor.count_error("export")
        limit = state.config.proxy.metrics_render_timeout_s
        msg = f"rendering /metrics took longer than proxy.metrics_render_timeout_s ({limit} s)"
        return Response(error_body(msg, "render_timeout"), 503, media_type="application/json")
    _, headers, body = out
    return Response(body, headers=dict(headers))


async def _admin_flush(request: Request) -> Response:
    state = _state(request)
    if not _authorized(state, request):
        return _unauthorized()
    loop = asyncio.get_running_loop()
    timeout_s = state.config.pipeline.shutdown_timeout_s
    flushed = await loop.run_in_executor(state.admin, state.monitor.flush, timeout_s)
    return JSONResponse({"flushed": bool(flushed)})


async def _admin_stats(request: Request) -> Response:
    state = _state(request)
    if not _authorized(state, request):
        return _unauthorized()
    stats = dict(getattr(state.monitor, "stats", {}) or {})
    store_stats = getattr(getattr(state.monitor, "store", None), "stats", None)
    if callable(store_stats):
        stats["store"] = store_stats()
    return Response(json.dumps(stats, default=str), media_type="application/json")


CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"
MESSAGES_PATH = "/v1/messages"
AZURE_CHAT_PATHS = ("/openai/v1/chat/completions", "/openai/deployments/{deployment}/chat/completions")
AZURE_RESPONSES_PATHS = ("/openai/v1/responses", "/openai/responses")
"""Azure OpenAI's paths for the same calls: its OpenAI-compatible ``/openai/v1`` API, a
deployment's chat completions, and the Responses API (both with an ``api-version`` query,
forwarded as sent). ``AzureOpenAI`` clients pointed at ``serve`` call these."""
_API_PATHS = {
    CHAT_PATH: "chat",
    AZURE_CHAT_PATHS[0]: "chat",
    RESPONSES_PATH: "responses",
    **dict.fromkeys(AZURE_RESPONSES_PATHS, "responses"),
    MESSAGES_PATH: "messages",
}
_DEPLOYMENT_CHAT = re.compile(r"/openai/deployments/[^/]+/chat/completions")
PROXIED_PREFIXES = ("/v1/", "/openai/")
"""Paths forwarded upstream: OpenAI's (and Anthropic's) ``/v1/*`` and Azure OpenAI's ``/openai/*``."""


def api_of(path: str) -> str | None:
    """``chat``, ``responses`` or ``messages`` for a ``POST`` to a monitored API path, else ``None``."""
    kind = _API_PATHS.get(path)
    if kind is None and path.startswith("/openai/deployments/") and _DEPLOYMENT_CHAT.fullmatch(path):
        return "chat"
    return kind


class ProxyApp(Starlette):
    """Starlette, with the forwarded routes dispatched straight to their forwarders.

    ``POST /v1/chat/completions``, ``POST /v1/responses`` and ``POST /v1/messages`` (and Azure
    OpenAI's paths for the first two, ``api_of``) go to their monitored forwarders, every other
    ``/v1/...`` or ``/openai/...`` request with a pass-through method to the pass-through
    forwarder: the routes the router would pick (``/v1/{path:path}`` matches any path under
    ``/v1/`` without a line break, and ``GET /v1/chat/completions`` falls through to it), without
    the router (a regex match per route) and the exception layers (``ServerErrorMiddleware``,
    ``ExceptionMiddleware`` and their per-request ``send`` wrappers; the forwarders raise no
    ``HTTPException``). An unexpected exception propagates to the server, which answers 500
    when no response has started and logs it, as ``ServerErrorMiddleware`` would (uvicorn
    does; so does any ASGI server). Every other path and method (405s, 404s, redirects, the
    service endpoints, lifespan) goes through the full Starlette stack.
    """

    chat: Any = None
    responses: Any = None
    messages: Any = None
    passthrough: Any = None

    async def __call__(self, scope: AsgiScope, receive: AsgiReceive, send: AsgiSend) -> None:
        if scope["type"] == "http" and not scope.get("root_path"):
            path: str = scope["path"]
            if path.startswith(PROXIED_PREFIXES) and "\n" not in path:
                if ("/." in path or "\\" in path) and _dot_segment(path):
                    await self._refuse(send, 400, "dot_segment", f"path {path!r} has a . or .. segment")
                    return
                method = scope["method"]
                kind = api_of(path) if method == "POST" else None
                if kind == "chat":
                    app = self.chat
                elif kind == "responses":
                    app = self.responses
                elif kind == "messages":
                    app = self.messages
                elif method in _PASSTHROUGH:
                    app = self.passthrough
                else:
                    app = None
                if app is not None:
                    scope["app"] = self
                    await app(scope, receive, send)
                    return
        elif scope["type"] == "websocket":
            await _no_websockets(self, scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    metrics: Any = None

    async def _refuse(self, send: AsgiSend, status: int, code: str, message: str) -> None:
        """A request never forwarded: a clear error, counted under ``route="other"``."""
        self.metrics.request("other", status)
        await send_json(send, status, error_body(message, code, "invalid_request_error"))


def _dot_segment(path: str) -> bool:
    """Whether the (percent-decoded) path has a ``.`` or ``..`` segment (``\\`` read as ``/``):
    an upstream or gateway that normalizes paths would resolve it elsewhere than ``serve``
    routed it (``/v1/../admin``, or ``/v1/x/../chat/completions`` past the monitor)."""
    return any(segment in (".", "..") for segment in path.replace("\\", "/").split("/"))


async def _no_websockets(app: ProxyApp, scope: AsgiScope, receive: AsgiReceive, send: AsgiSend) -> None:
    """WebSocket connections (the Realtime API) are not proxied: refused with a clear answer
    (an HTTP 501 where the server can send one, else a close before accepting: 403)."""
    await receive()  # websocket.connect
    message = f"handoffmon serve does not proxy WebSocket connections ({scope.get('path', '')!r})"
    if "websocket.http.response" in (scope.get("extensions") or {}):
        body = error_body(message, "websocket_not_supported", "invalid_request_error")
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "websocket.http.response.start", "status": 501, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
        status = 501
    else:
        await send(
            {"type": "websocket.close", "code": 1008, "reason": "WebSocket connections are not proxied"}
        )
        status = 403
    if app.metrics is not None:
        app.metrics.request("other", status)


def _routes(state: ProxyState) -> list[Route]:
    proxy = state.config.proxy
    chat = Forwarder(
        state.upstream,
        state.metrics,
        max_body_bytes=proxy.max_body_bytes,
        monitor=state.monitor,
        route="chat_completions",
        client_timeout_s=proxy.client_timeout_s,
        body_timeout_s=proxy.body_timeout_s,
        max_monitored_reply_bytes=proxy.max_monitored_reply_bytes,
        routing=body_routing(state.runtime.routing, state.monitor),
        shadow=_shadow(state),
        held=state.held_bodies,
    )
    responses, messages = (
        Forwarder(
            state.upstream,
            state.metrics,
            max_body_bytes=proxy.max_body_bytes,
            monitor=state.monitor,
            route=api.name,
            client_timeout_s=proxy.client_timeout_s,
            body_timeout_s=proxy.body_timeout_s,
            max_monitored_reply_bytes=proxy.max_monitored_reply_bytes,
            api=api,
            routing=body_routing(state.runtime.routing, state.monitor, api) if api is RESPONSES else None,
            # shadow calls go to the upstream's chat completions: a Messages upstream has none
            shadow=_shadow(state) if api is RESPONSES else None,
            held=state.held_bodies,
        )
        for api in (RESPONSES, MESSAGES)
    )
    state.background = responses.background
    if state.background is not None:
        calls = state.background.calls
        state.metrics.background_calls = calls.__len__
    passthrough = Forwarder(
        state.upstream,
        state.metrics,
        max_body_bytes=proxy.max_body_bytes,
        client_timeout_s=proxy.client_timeout_s,
        max_monitored_reply_bytes=proxy.max_monitored_reply_bytes,
        # polls, cancels and deletes of the background calls the Responses forwarder parked
        background=responses.background,
    )
    return [
        Route("/healthz", _healthz, methods=["GET"]),
        Route("/readyz", _readyz, methods=["GET"]),
        Route("/metrics", _metrics, methods=["GET"]),
        Route("/admin/flush", _admin_flush, methods=["POST"]),
        Route("/admin/stats", _admin_stats, methods=["GET"]),
        *(Route(p, chat, methods=["POST"]) for p in (CHAT_PATH, *AZURE_CHAT_PATHS)),
        *(Route(p, responses, methods=["POST"]) for p in (RESPONSES_PATH, *AZURE_RESPONSES_PATHS)),
        Route(MESSAGES_PATH, messages, methods=["POST"]),
        Route("/v1/{path:path}", passthrough, methods=PASSTHROUGH_METHODS),
        Route("/openai/{path:path}", passthrough, methods=PASSTHROUGH_METHODS),
    ]


def _shadow(state: ProxyState) -> Callable[[Sequence[tuple[str, str]]], ShadowSource | None] | None:
    """Shadow calls through the upstream when the runtime runs shadow continuation."""
    if state.runtime.shadow is None:
        return None
    from handoffmon.proxy.shadow import shadow_sources

    config = state.config
    return shadow_sources(
        state.upstream,
        state.monitor.names,
        config.shadow.request_models,
        config.proxy.max_monitored_reply_bytes,
    )


async def _not_found(scope: Scope, receive: Receive, send: Send) -> None:
    """Routes outside /v1 and the service endpoints: a clear 404 (never forwarded)."""
    msg = f"handoffmon serve has no route {scope['method']} {scope['path']}; it proxies /v1/* and /openai/*"
    await send_json(send, 404, error_body(msg, "not_found", "invalid_request_error"))


async def _method_not_allowed(request: Request, exc: Exception) -> Response:
    msg = f"method {request.method} not allowed on {request.url.path}"
    return Response(
        error_body(msg, "method_not_allowed", "invalid_request_error"), 405, media_type="application/json"
    )


def create_app(
    config: HandoffmonConfig,
    *,
    runtime: Runtime | None = None,
    upstream_session_factory: SessionFactory | None = None,
) -> Starlette:
    """Build the proxy app.

    Args:
        config: ``proxy.upstream`` must be set; ``proxy.*`` limits, ``store``,
            ``attribution`` and ``telemetry`` are honoured.
        runtime: a runtime to monitor with; by default ``build_runtime(config,
            registry=None)`` — the same construction as ``wrap`` and the LiteLLM callback,
            with its series kept private and served at this app's ``/metrics`` — started
            at startup and closed (drained) at shutdown. An injected runtime is flushed,
            not closed, at shutdown.
        upstream_session_factory: builds the pooled ``aiohttp.ClientSession``.

    Raises:
        ConfigError: ``proxy.upstream`` is missing or not an http(s) URL.
    """
    if not config.proxy.upstream:
        raise ConfigError("handoffmon serve needs an upstream URL", key="proxy.upstream")
    try:
        upstream = Upstream(
            config.proxy.upstream,
            timeout_s=config.proxy.upstream_timeout_s,
            max_requests=config.proxy.max_upstream_requests,
            queue_timeout_s=config.proxy.upstream_queue_timeout_s,
            session_factory=upstream_session_factory,
        )
    except ValueError as exc:
        raise ConfigError(str(exc), key="proxy.upstream") from exc
    owns = runtime is None
    if runtime is None:
        from handoffmon.runtime import build_runtime

        runtime = build_runtime(config, registry=None, start=False)
    state = ProxyState(config, runtime, upstream, owns)
    routes = _routes(state)
    app = ProxyApp(routes=routes, lifespan=_lifespan(state), exception_handlers={405: _method_not_allowed})
    app.chat = next(r.app for r in routes if r.path == CHAT_PATH)
    app.responses = next(r.app for r in routes if r.path == RESPONSES_PATH)
    app.messages = next(r.app for r in routes if r.path == MESSAGES_PATH)
    app.passthrough = next(r.app for r in routes if r.path == "/v1/{path:path}")
    app.router.default = _not_found  # type: ignore[method-assign,assignment]
    app.metrics = state.metrics
    app.state.proxy = state
    return app


def _lifespan(state: ProxyState) -> Any:
    """Start the runtime and open the upstream pool; at shutdown drain, then close the pool."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if state.owns_runtime:
            state.runtime.start()
        await state.upstream.start()
        state.ready = True
        try:
            yield
        finally:
            state.ready = False
            state.renderer.close()
            state.admin.shutdown(wait=False, cancel_futures=True)
            if state.background is not None:  # counted unfinished: no poll will reach us again
                state.background.close()
            # drain first: queued shadow calls still need the upstream pool and this loop
            await asyncio.to_thread(_drain, state)
            await state.upstream.close()

    return lifespan


def _drain(state: ProxyState) -> None:
    """Shutdown: process every queued turn (close our runtime; flush an injected one)."""
    budget = state.config.pipeline.shutdown_timeout_s
    try:
        if state.owns_runtime:
            state.runtime.close(budget)
        else:
            state.runtime.flush(budget)
    except Exception:  # fail-open even at shutdown: log and let the process exit
        _log.warning("handoffmon serve: draining the monitor failed", exc_info=True)
