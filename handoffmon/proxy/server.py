"""Run the proxy on uvicorn: one worker, SIGTERM/SIGINT drain in-flight requests and the check queue."""

from __future__ import annotations

import gc
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from handoffmon._extras import requires_extra
from handoffmon.config import HandoffmonConfig
from handoffmon.errors import ConfigError
from handoffmon.pipeline.errors import LogLimiter

if TYPE_CHECKING:
    from handoffmon.proxy.metrics import ProxyMetrics

_log = logging.getLogger("handoffmon.proxy")


LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


def check_exposure(config: HandoffmonConfig, source: str | None = None) -> None:
    """Refuse to listen beyond loopback while ``/metrics`` and ``/admin/*`` are open to anyone.

    Raises:
        ConfigError: ``proxy.host`` is not a loopback address and ``telemetry.metrics_token``
            is unset (the message names the key and ``source``, the config file).
    """
    host = config.proxy.host.strip("[]")
    if config.telemetry.metrics_token or host in LOOPBACK_HOSTS or host.startswith("127."):
        return
    raise ConfigError(
        f"proxy.host is {config.proxy.host!r} (beyond loopback): /metrics and /admin/* would be open "
        "to the network; set a bearer token (HANDOFFMON_TELEMETRY__METRICS_TOKEN) or bind 127.0.0.1",
        key="telemetry.metrics_token",
        source=source,
    )


def check_limits(config: HandoffmonConfig, source: str | None = None) -> None:
    """Refuse a byte budget no request could be monitored within.

    Raises:
        ConfigError: ``pipeline.max_queued_bytes`` or ``proxy.max_held_body_bytes`` is below
            ``proxy.max_body_bytes``: requests between the two would always be shed from
            monitoring (the message names the key and ``source``).
    """
    body = config.proxy.max_body_bytes
    if config.proxy.max_held_body_bytes < body:
        raise ConfigError(
            f"proxy.max_held_body_bytes ({config.proxy.max_held_body_bytes}) is below proxy.max_body_bytes "
            f"({body}): a body between the two could never be held to be monitored; raise it or lower "
            "the body limit",
            key="proxy.max_held_body_bytes",
            source=source,
        )
    budget = config.pipeline.max_queued_bytes
    if budget >= body:
        return
    raise ConfigError(
        f"pipeline.max_queued_bytes ({budget}) is below proxy.max_body_bytes ({body}): requests "
        "between the two could never be monitored; raise the budget or lower the body limit",
        key="pipeline.max_queued_bytes",
        source=source,
    )


def guarded_protocol(
    max_header_bytes: int, timeout_s: float, refused: Callable[[int], None] | None = None
) -> type[Any]:
    """An ``HttpToolsProtocol`` subclass for ``uvicorn.Config(http=...)`` with head limits.

    ``refused(status)`` is called for each request the connection itself answers, never
    reaching the app: 400 (not HTTP), 408 (head too slow), 431 (head too large).
    """
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from handoffmon.proxy.forward import DISCONNECT_EXTENSION

    def _counted(status: int) -> None:
        if refused is not None:
            try:
                refused(status)
            except Exception:  # pragma: no cover - counting must not break the answer
                _log.debug("handoffmon serve could not count a refused request", exc_info=True)

    class GuardedHttpToolsProtocol(HttpToolsProtocol):  # type: ignore[misc]
        """Per-connection limits uvicorn's httptools protocol lacks: head size and head time.

        ``max_header_bytes`` bounds request line plus headers (answered 431, never forwarded;
        at most one socket read past the limit is buffered); ``timeout_s`` bounds the time
        from connection (or from the first byte of a keep-alive request) until the headers
        are complete (answered 408): half-open and slowloris clients cannot hold connections.

        Each request's scope also carries ``forward.DISCONNECT_EXTENSION``: the connection's
        in-flight disconnect watches, told ``lost()`` when the connection closes.
        """

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._watchers: dict[object, object] = {}  # ASGI extension values are dicts
            self._head_open = True
            self._head_bytes = 0
            self._parsed = 0
            self._head_since: float | None = self.loop.time()
            self._head_timer: Any = self.loop.call_later(timeout_s, self._head_check)

        def data_received(self, data: bytes) -> None:
            if self._head_open:
                if self._head_bytes > max_header_bytes:
                    return self._refuse(431, "request header fields too large")
                self._head_bytes += len(data)
                if self._head_since is None:  # first bytes of a keep-alive connection's next request
                    self._head_since = self.loop.time()
                    if self._head_timer is None:
                        self._head_timer = self.loop.call_later(timeout_s, self._head_check)
            super().data_received(data)

        def on_url(self, url: bytes) -> None:
            super().on_url(url)
            self._count(len(url))

        def on_header(self, name: bytes, value: bytes) -> None:
            if not self._head_open:
                # a chunked body's trailer field: httptools reports it as a header, and uvicorn
                # would append it to the request's headers, forwarded upstream as one (RFC 9110
                # §6.5.2: trailers are not merged into the header section); it is dropped
                return
            self._count(len(name) + len(value) + 4)
            super().on_header(name, value)

        def _count(self, n: int) -> None:
            self._parsed += n
            if self._parsed > max_header_bytes:
                self._head_bytes = max_header_bytes + 1
                raise _HeadTooLarge  # aborts parsing; send_400_response answers 431

        def on_message_begin(self) -> None:
            self._parsed = 0
            if self._head_since is None:
                # a pipelined request that began in the same read as the one before it ended:
                # its head is timed from here (no further read may come to start the clock)
                self._head_since = self.loop.time()
                if self._head_timer is None:
                    self._head_timer = self.loop.call_later(timeout_s, self._head_check)
            super().on_message_begin()
            self.scope["extensions"] = {DISCONNECT_EXTENSION: self._watchers}

        def on_headers_complete(self) -> None:
            self._head_open = False
            self._head_bytes = 0  # body bytes read with the head are not head bytes (400, not 431)
            self._head_since = None  # the timer, if pending, finds no head in progress
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._head_open, self._head_bytes = True, 0
            if not self.pipeline:
                # The body is whole: read on, so a client that hangs up is seen. uvicorn paused
                # reading for a body over its 64 KiB buffer and resumes only in the app's next
                # receive(), which a forwarder waiting on its upstream never makes: the client's
                # close went unseen (CLOSE-WAIT), and the request kept its body and an upstream
                # slot until the upstream answered. A pipelined request after this one pauses
                # reading again (uvicorn's on_headers_complete), so nothing more piles up.
                self.flow.resume_reading()

        def send_400_response(self, msg: str) -> None:
            if self._head_bytes > max_header_bytes:
                return self._refuse(431, "request header fields too large")
            _counted(400)
            super().send_400_response(msg)

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_timer()
            watchers = self._watchers
            while watchers:
                watch: Any = watchers.popitem()[0]
                watch.lost()
            super().connection_lost(exc)

        def _stop_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_check(self) -> None:
            """The head timer: refuse a head still incomplete ``timeout_s`` after it began.

            One timer per connection, not one per request: a keep-alive request only notes
            when its first bytes came; a timer still pending from an earlier request checks
            against that and re-arms itself for the time left.
            """
            self._head_timer = None
            since = self._head_since
            if not self._head_open or since is None or self.transport.is_closing():
                return
            left = since + timeout_s - self.loop.time()
            cycle = self.cycle
            if left <= 0 and cycle is not None and not cycle.response_complete:
                # a pipelined head stalled while the response before it is still going out:
                # refused once that response is done, never written into the middle of it
                left = timeout_s
            if left > 0:
                self._head_timer = self.loop.call_later(left, self._head_check)
            else:
                self._refuse(408, "request headers not received within proxy.client_timeout_s")

        def _refuse(self, status: int, msg: str) -> None:
            self._head_open = False
            self._stop_timer()
            if self.transport.is_closing():
                return
            _counted(status)
            reason = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}[status]
            body = msg.encode()
            self.transport.write(
                b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (status, reason, len(body), body)
            )
            self.transport.close()

    return GuardedHttpToolsProtocol


class _HeadTooLarge(Exception):
    pass


def uvicorn_options(config: HandoffmonConfig, metrics: ProxyMetrics | None = None) -> dict[str, Any]:
    """``uvicorn.Config`` keyword arguments for the proxy, apart from the app and address.

    With ``metrics`` (the app's), requests the connection refuses before the app sees them
    (400 not HTTP, 408, 431) count in ``handoffmon_proxy_requests_total{route="other"}``.

    The upstream's own ``date``/``server`` headers are forwarded, so uvicorn must not add
    its own. Graceful shutdown: on SIGTERM uvicorn stops accepting, lets in-flight
    requests finish (up to ``pipeline.shutdown_timeout_s``), then the lifespan drains the
    monitor's check queue.
    """
    return {
        "lifespan": "on",
        "access_log": False,
        "server_header": False,
        "date_header": False,
        "timeout_graceful_shutdown": max(1, int(config.pipeline.shutdown_timeout_s)),
        "timeout_keep_alive": 75,
        "limit_concurrency": config.proxy.max_connections or None,
        "http": guarded_protocol(
            config.proxy.max_header_bytes,
            config.proxy.client_timeout_s,
            None if metrics is None else lambda status: metrics.request("other", status),
        ),
    }


CLIENT_NOISE = (
    "Invalid HTTP request received.",
    "Unsupported upgrade request.",
    "No supported WebSocket library detected.",
    "Exceeded concurrency limit.",
)
"""Starts of the WARNING lines uvicorn writes for each bad or excess request a client sends:
one line per request let any client write the logs at its own request rate."""


class UvicornNoise(logging.Filter):
    """Quiets ``uvicorn.error``: drops the aborted-response error, limits client-made warnings.

    uvicorn logs an aborted response as an application error; serve aborts on purpose (the
    upstream broke off) and counts it in ``handoffmon_proxy_upstream_errors_total``. The
    warnings a client triggers at will (:data:`CLIENT_NOISE`) pass at most once per kind per
    ``interval_s`` (``pipeline.error_log_interval_s``), the next one saying how many were held
    back; the requests are counted in ``handoffmon_proxy_requests_total{route="other"}``.
    """

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._limiter = LogLimiter(interval_s, clock)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message == "ASGI callable returned without completing response.":
            return False
        kind = next((k for k in CLIENT_NOISE if message.startswith(k)), None)
        if kind is None:
            return True
        held = self._limiter.allow(kind)
        if held is None:
            return False
        if held:
            record.msg, record.args = f"{message} (+{held} like it since the last line)", ()
        return True


def quiet_uvicorn(config: HandoffmonConfig) -> UvicornNoise:
    """Install (once per process) the :class:`UvicornNoise` filter on ``uvicorn.error``."""
    logger = logging.getLogger("uvicorn.error")
    for existing in logger.filters:
        if isinstance(existing, UvicornNoise):
            return existing
    noise = UvicornNoise(config.pipeline.error_log_interval_s)
    logger.addFilter(noise)
    return noise


def draining_server(cfg: Any, state: Any, delay_s: float) -> Any:
    """A ``uvicorn.Server`` that, on SIGTERM, first answers ``/readyz`` 503 for ``delay_s``
    while still serving, then shuts down gracefully (a second signal: at once)."""
    import signal

    import uvicorn

    class DrainingServer(uvicorn.Server):  # type: ignore[misc]
        _drain_at: float | None = None
        _drain_sig = 0

        def handle_exit(self, sig: int, frame: Any) -> None:
            if sig == signal.SIGTERM and delay_s > 0 and self._drain_at is None and not self.should_exit:
                state.draining = True
                self._drain_sig = sig
                self._drain_at = time.monotonic() + delay_s
                return
            super().handle_exit(sig, frame)

        async def on_tick(self, counter: int) -> bool:
            if self._drain_at is not None and time.monotonic() >= self._drain_at and not self.should_exit:
                super().handle_exit(self._drain_sig, None)
            result: bool = await super().on_tick(counter)
            return result

    return DrainingServer(cfg)


def serve(
    config: HandoffmonConfig,
    *,
    log_level: str = "warning",
    source: str | None = None,
    announce: Callable[[], None] | None = None,
) -> None:
    """Serve ``create_app(config)`` until SIGTERM/SIGINT; returns after the monitor drained.
    ``announce`` runs once the app is built, before the port is bound.

    Raises:
        ConfigError: see :func:`check_exposure` and :func:`check_limits` (``source`` names
            the config file).
    """
    check_exposure(config, source)
    check_limits(config, source)
    with requires_extra("proxy", "handoffmon serve"):
        import uvicorn

    from handoffmon.proxy.app import create_app

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    app = create_app(config)
    if announce is not None:
        announce()
    # Startup objects (modules, config, compiled rules) live as long as the process: move them
    # out of the collector's reach so full collections, which pause the event loop, stay short.
    gc.collect()
    gc.freeze()
    cfg = uvicorn.Config(
        app,
        host=config.proxy.host,
        port=config.proxy.port,
        log_level=log_level,
        **uvicorn_options(config, app.state.proxy.metrics),
    )
    _log.info("handoffmon serve on %s:%d -> %s", config.proxy.host, config.proxy.port, config.proxy.upstream)
    quiet_uvicorn(config)
    draining_server(cfg, app.state.proxy, config.proxy.drain_delay_s).run()
