"""Serving ``/metrics``: a standalone HTTP server, WSGI and ASGI apps, token auth, multiprocess mode."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hmac
import math
import os
import socket
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any, cast
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import Collector

from handoffmon.pipeline import fork

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
ASGIApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
    Awaitable[None],
]

_UNAUTHORIZED = (
    "401 Unauthorized",
    [("Content-Type", "text/plain; charset=utf-8"), ("WWW-Authenticate", 'Bearer realm="metrics"')],
    b"401: a bearer token is required\n",
)


def render(
    registry: Collector, accept: str = "", accept_encoding: str = "", query: str = ""
) -> tuple[str, list[tuple[str, str]], bytes]:
    """Exposition for one request: (status, headers, body).

    OpenMetrics (with exemplars) when the client asks for it, the Prometheus text format
    otherwise; ``?name[]=...`` restricts the families; gzip when accepted.
    """
    encoder, content_type = choose_encoder(accept)
    params = parse_qs(query)
    if "name[]" in params and isinstance(registry, CollectorRegistry):
        registry = registry.restricted_registry(params["name[]"])
    body = encoder(registry)
    headers = [("Content-Type", content_type)]
    if gzip_accepted(accept_encoding):
        body = gzip.compress(body)
        headers.append(("Content-Encoding", "gzip"))
    return "200 OK", headers, body


def token_ok(authorization: str | None, token: str | None) -> bool:
    """Whether an ``Authorization`` header carries ``Bearer <token>`` (constant-time compare)."""
    if token is None:
        return True
    scheme, _, given = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


def metrics_wsgi_app(registry: Collector, *, token: str | None = None) -> WSGIApp:
    """A WSGI app serving ``registry`` at whatever path it is mounted on.

    Args:
        registry: the exporter's registry, or ``multiprocess_registry()`` under gunicorn.
        token: when set, requests need ``Authorization: Bearer <token>`` (else 401).
    """

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not token_ok(environ.get("HTTP_AUTHORIZATION"), token):
            status, headers, body = _UNAUTHORIZED
        elif environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            status, headers, body = "405 Method Not Allowed", [("Allow", "GET, HEAD")], b""
        else:
            status, headers, body = render(
                registry,
                environ.get("HTTP_ACCEPT", ""),
                environ.get("HTTP_ACCEPT_ENCODING", ""),
                environ.get("QUERY_STRING", ""),
            )
        start_response(status, headers)
        return [body]

    return app


def metrics_asgi_app(registry: Collector, *, token: str | None = None) -> ASGIApp:
    """An ASGI app serving ``registry``; exposition runs in a worker thread, not the event loop.

    Mount it, e.g. ``Mount("/metrics", app=metrics_asgi_app(exporter.registry))``.

    Args:
        registry: the exporter's registry, or ``multiprocess_registry()``.
        token: when set, requests need ``Authorization: Bearer <token>`` (else 401).
    """

    async def app(
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            return
        hdrs = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if not token_ok(hdrs.get("authorization"), token):
            status, headers, body = _UNAUTHORIZED
        elif scope.get("method", "GET") not in ("GET", "HEAD"):
            status, headers, body = "405 Method Not Allowed", [("Allow", "GET, HEAD")], b""
        else:
            query = scope.get("query_string", b"").decode("latin-1")
            status, headers, body = await asyncio.to_thread(
                render, registry, hdrs.get("accept", ""), hdrs.get("accept-encoding", ""), query
            )
        raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        await send({"type": "http.response.start", "status": int(status.split(" ")[0]), "headers": raw})
        await send({"type": "http.response.body", "body": body if scope.get("method") != "HEAD" else b""})

    return app


CONNECTION_TIMEOUT_S = 10.0
"""How long the ``metrics_port`` server waits on one read or write of a connection before
closing it (a request that stops half-sent is one)."""
MAX_CONNECTIONS = 16
"""Connections the ``metrics_port`` server handles at once, one thread each. Past it, the
oldest connection that has not finished sending its request is closed for the new one; when
every connection is past its request (being answered), the new one is closed at once."""
REFUSALS_HELP = (
    "Connections the metrics_port server closed unserved, by reason: timeout (no complete request "
    "or no progress within 10 s), evicted (the oldest of those still sending their request, closed "
    "for a new connection at the connection cap), busy (every slot answering a request)."
)
REFUSAL_REASONS = ("busy", "evicted", "timeout")


class _Server(ThreadingMixIn, WSGIServer):
    """One thread per connection, at most ``max_connections`` of them, each read and write
    bounded by ``timeout_s``; what it closes unserved is counted in ``refusals``."""

    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False
    request_queue_size = 64
    timeout_s = CONNECTION_TIMEOUT_S
    max_connections = MAX_CONNECTIONS

    def server_activate(self) -> None:
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self._lock = threading.Lock()
        self._sending: dict[socket.socket, None] = {}  # still sending their request, oldest first
        self.refusals = dict.fromkeys(REFUSAL_REASONS, 0)
        super().server_activate()

    def count(self, reason: str) -> None:
        with self._lock:
            self.refusals[reason] += 1

    def received(self, request: socket.socket) -> None:
        """``request`` sent its whole request: it is answered, never evicted."""
        with self._lock:
            self._sending.pop(request, None)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            with self._lock:
                oldest = next(iter(self._sending), None)
                if oldest is not None:
                    del self._sending[oldest]
                    self.refusals["evicted"] += 1
            if oldest is not None:
                with contextlib.suppress(OSError):  # its thread reads EOF and ends, freeing a slot
                    oldest.shutdown(socket.SHUT_RDWR)
            if oldest is None or not self._slots.acquire(timeout=1.0):
                self.count("busy")
                self.shutdown_request(request)
                return
        try:
            request.settimeout(self.timeout_s)
            with self._lock:
                self._sending[request] = None
            super().process_request(request, client_address)
        except BaseException:
            self.received(request)
            self._slots.release()
            self.shutdown_request(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.received(request)
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away or stalled is no traceback on stderr."""


class _V6Server(_Server):
    address_family = socket.AF_INET6


class _Quiet(WSGIRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not worth a log line each."""

    def handle(self) -> None:
        try:
            super().handle()
        except TimeoutError:
            self.server.count("timeout")
        except OSError:
            pass  # reset by the client, or evicted

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        self.server.received(self.request)
        return parsed


class RefusalsCollector(Collector):
    """``handoffmon_metrics_port_refusals_total{reason}`` of a ``MetricsServer``, read at scrape time."""

    def __init__(self, refusals: Callable[[], dict[str, int]]) -> None:
        self._refusals = refusals

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily("handoffmon_metrics_port_refusals", REFUSALS_HELP, labels=["reason"])
        for reason, value in sorted(self._refusals().items()):
            family.add_metric([reason], value)
        yield family


@dataclass
class MetricsServer:
    """A running ``/metrics`` server (stop it with ``close()`` or a ``with`` block)."""

    server: _Server
    thread: threading.Thread
    addr: str

    def refusals(self) -> dict[str, int]:
        """Connections closed unserved so far, by reason (``REFUSAL_REASONS``)."""
        with self.server._lock:
            return dict(self.server.refusals)

    def collector(self) -> RefusalsCollector:
        """Its refusals as ``handoffmon_metrics_port_refusals_total{reason}``, to register."""
        return RefusalsCollector(self.refusals)

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        """``http://addr:port/metrics``."""
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and release the socket."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_metrics_server(
    registry: Collector,
    port: int,
    addr: str = "127.0.0.1",
    *,
    token: str | None = None,
    timeout_s: float = CONNECTION_TIMEOUT_S,
    max_connections: int = MAX_CONNECTIONS,
) -> MetricsServer:
    """Serve ``registry`` on ``http://addr:port/metrics`` from a daemon thread.

    Args:
        registry: the exporter's registry, or ``multiprocess_registry()``.
        port: TCP port; 0 picks a free one (read it back from ``.port``).
        addr: listen address; loopback by default, ``0.0.0.0`` / ``::`` to expose it.
        token: when set, scrapes need ``Authorization: Bearer <token>``.
        timeout_s: a connection's reads and writes each wait at most this long.
        max_connections: connections handled at once (see ``MAX_CONNECTIONS``).

    Returns:
        The running server. Other paths answer 404.
    """
    metrics = metrics_wsgi_app(registry, token=token)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "/") not in ("/metrics", "/metrics/"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"404: metrics are at /metrics\n"]
        return metrics(environ, start_response)

    base = _V6Server if ":" in addr else _Server
    server_class = type(base.__name__, (base,), {"timeout_s": timeout_s, "max_connections": max_connections})
    server = cast(_Server, make_server(addr, port, app, server_class=server_class, handler_class=_Quiet))
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="handoffmon-metrics", daemon=True
    )
    thread.start()
    return MetricsServer(server=server, thread=thread, addr=addr)


def multiprocess_registry(path: str | None = None) -> CollectorRegistry:
    """A registry that sums every process's metrics from ``PROMETHEUS_MULTIPROC_DIR``.

    Serve this one (not a per-process registry) under gunicorn and similar pre-fork
    servers. See docs/guides/telemetry.md (pre-fork servers) for the limits (no exemplars, refit
    gauges are ``mostrecent``, vanished refit series become NaN).

    Args:
        path: the directory (default: ``$PROMETHEUS_MULTIPROC_DIR``).
    """
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
    return registry


def mark_process_dead(pid: int, path: str | None = None) -> None:
    """Call from gunicorn's ``child_exit`` hook so a dead worker's live gauges go away."""
    from prometheus_client.multiprocess import mark_process_dead as _mark

    _mark(pid, path)  # type: ignore[no-untyped-call]


MAX_MIRRORED_SERIES = 1000
"""Bound on the series one ``FileMirror`` writes (its collector's labels are bounded already)."""

GAUGE_MODES: dict[str, Callable[[Iterable[float]], float]] = {"livesum": sum, "livemax": max, "livemin": min}
"""How a ``FileMirror`` writes a scrape-time gauge (a collector's ``file_gauges``): the
``multiprocess_mode`` of its file-backed gauge, which also combines the values of several
collectors of one process (two runtimes' shadow budgets add up; a breaker is open if one is; the
oldest routing table's timestamp is the least)."""
GONE_VALUES: dict[str, float] = {"livesum": 0.0, "livemax": 0.0, "livemin": math.inf}
"""What a gauge series no mirror of the process reports any more is written as (a file entry
cannot be removed): what leaves the other processes' values as they are when combined (a
timestamp of 0 would be the oldest table of all)."""

_file_counters: dict[str, tuple[Counter, tuple[str, ...]]] = {}
"""The file-backed counters every mirror of this process writes, by name: one value per series and
process, since two prometheus_client values of one series in one process overwrite each other's file
entry."""
_file_gauges: dict[str, tuple[Gauge, tuple[str, ...], str]] = {}
"""The file-backed gauges of this process, by name (label names and mode)."""
_gauges_written: set[tuple[str, tuple[str, ...]]] = set()
"""Gauge series this process has written: one no mirror reports any more is written 0."""
_mirrors: weakref.WeakSet[FileMirror] = weakref.WeakSet()
_mirrors_lock = threading.Lock()
fork.renew_in_child(_mirrors_lock)
_gauges_lock = threading.Lock()  # the file gauges and what was written; taken after a mirror's own
fork.renew_in_child(_gauges_lock)
_sync_lock = threading.Lock()
"""One ``sync_file_mirrors`` at a time (a check thread's and the ``FileRefresher``'s), and none
across a fork: prometheus_client's lock over the files is out of reach of ``fork.renew_locks``, so
a fork during a write would leave it held in the child (``_fork_prepare``)."""
fork.renew_in_child(_sync_lock)
_sync_held_for_fork = False
GaugeSample = tuple[str, str, tuple[str, ...], tuple[str, ...], float]
"""A gauge sample to write: name, help, label names, label values, value."""


class FileMirror:
    """A scrape-time collector's series, written into the ``PROMETHEUS_MULTIPROC_DIR`` files.

    A multiprocess ``/metrics`` (LiteLLM Proxy with several workers, gunicorn) serves the files
    only, never a worker's registry, so series a collector computes at scrape time (the store's
    failures and evictions, the routing decisions and table age, the shadow calls, budget and
    breakers) were missing there. :meth:`sync` adds what each ``*_total`` sample of the collector
    gained since the last sync to a file-backed counter of the same name and labels (created at 0
    when first seen; at most ``MAX_MIRRORED_SERIES`` series), so the multiprocess collector sums
    them over workers, dead ones included, like handoffmon's other counters. The gauges the
    collector names in its ``file_gauges`` attribute (name → a ``GAUGE_MODES`` mode) are set to
    their value now in a file-backed gauge of that ``multiprocess_mode``: the live workers'
    sum, maximum or minimum, as of each worker's last sync (a worker's series goes when it is
    marked dead). Other gauges are not mirrored. The worker's own registry keeps serving the
    collector itself. After a fork the child's files start at 0 and it adds only what grew in
    the child. Every live mirror of the process is synced by :func:`sync_file_mirrors`, which the
    ``PrometheusExporter`` calls on a check thread's idle turn (at most every ``FILE_SYNC_S``
    under load), after a shadow pair and a refit, at ``force_flush``, and every
    ``file_refresh.FILE_REFRESH_S`` from its ``FileRefresher`` thread, turns or not (a gauge
    computed from the clock, such as a table's age, keeps moving on a quiet worker).
    """

    def __init__(self, collector: Collector) -> None:
        self._collector = collector
        gauges = dict(getattr(collector, "file_gauges", {}))
        unknown = sorted(mode for mode in gauges.values() if mode not in GAUGE_MODES)
        if unknown:
            raise ValueError(f"file_gauges: unknown modes {unknown} (known: {sorted(GAUGE_MODES)})")
        self._gauge_modes: dict[str, str] = gauges
        self._seen: dict[tuple[str, tuple[str, ...]], float] = {}
        self._gauges: list[GaugeSample] = []  # the collector's gauges at the last sync
        self._lock = threading.Lock()
        with _mirrors_lock:
            _mirrors.add(self)

    def sync(self, *, write_gauges: bool = True) -> None:
        """Write what the collector's counters gained since the last call, and (``write_gauges``)
        every mirror's gauges. Raises what the collector raises."""
        with self._lock:
            gauges: list[GaugeSample] = []
            for family in self._collector.collect():
                if family.type == "gauge" and family.name in self._gauge_modes:
                    for sample in family.samples:
                        names, values = tuple(sample.labels), tuple(sample.labels.values())
                        gauges.append((family.name, family.documentation, names, values, sample.value))
                    continue
                if family.type != "counter":
                    continue
                for sample in family.samples:
                    if sample.name.endswith("_total"):
                        self._add(family.name, family.documentation, sample.labels, sample.value)
            self._gauges = gauges[:MAX_MIRRORED_SERIES]
        if write_gauges:
            _write_gauges()

    def gauge_samples(self) -> list[tuple[GaugeSample, str]]:
        """The collector's mirrored gauges at the last sync, each with its mode."""
        with self._lock:
            return [(g, self._gauge_modes[g[0]]) for g in self._gauges]

    def _add(self, name: str, doc: str, labels: dict[str, str], value: float) -> None:
        key = (name, tuple(labels.values()))
        seen = self._seen.get(key)
        if seen is not None and value <= seen:  # the usual case: written already
            return
        if seen is None and len(self._seen) >= MAX_MIRRORED_SERIES:
            return
        counter = _file_counter(name, doc, tuple(labels))
        if counter is None:
            return
        child = counter.labels(*labels.values()) if labels else counter  # a new series starts at 0
        if value > (seen or 0.0):
            child.inc(value - (seen or 0.0))
            seen = value
        self._seen[key] = seen or 0.0


def _file_counter(name: str, doc: str, labelnames: tuple[str, ...]) -> Counter | None:
    """The process's file-backed counter ``name`` (None: it exists with other label names)."""
    with _mirrors_lock:
        made = _file_counters.get(name)
        if made is None:
            made = _file_counters[name] = (Counter(name, doc, labelnames, registry=None), labelnames)
    return made[0] if made[1] == labelnames else None


def _file_gauge(name: str, doc: str, labelnames: tuple[str, ...], mode: str) -> Gauge | None:
    """The process's file-backed gauge ``name`` (None: it exists with other label names or mode;
    call under ``_gauges_lock``)."""
    made = _file_gauges.get(name)
    if made is None:
        gauge = Gauge(name, doc, labelnames, registry=None, multiprocess_mode=mode)  # type: ignore[arg-type]
        made = _file_gauges[name] = (gauge, labelnames, mode)
    return made[0] if made[1:] == (labelnames, mode) else None


def _write_gauges() -> None:
    """Set every mirrored gauge series of the process to its mirrors' combined value (a series
    no live mirror reports any more: 0)."""
    with _mirrors_lock:
        mirrors = list(_mirrors)
    combined: dict[tuple[str, tuple[str, ...]], tuple[str, tuple[str, ...], str, list[float]]] = {}
    for mirror in mirrors:  # each under its own lock, never under _mirrors_lock (sync's order)
        for (name, doc, names, values, value), mode in mirror.gauge_samples():
            entry = combined.setdefault((name, values), (doc, names, mode, []))
            entry[3].append(value)
    with _gauges_lock:
        for (name, values), (doc, names, mode, found) in combined.items():
            gauge = _file_gauge(name, doc, names, mode)
            if gauge is not None:
                (gauge.labels(*values) if values else gauge).set(GAUGE_MODES[mode](found))
                _gauges_written.add((name, values))
        for name, values in _gauges_written - combined.keys():
            gauge, _, mode = _file_gauges[name]
            (gauge.labels(*values) if values else gauge).set(GONE_VALUES[mode])


def mirror_to_files(collector: Collector) -> FileMirror | None:
    """A ``FileMirror`` of ``collector`` under ``PROMETHEUS_MULTIPROC_DIR`` (its series written now,
    at their values; a collector that fails is tried again at the next sync), else None. Keep a
    reference: the mirror lives (and is synced) as long as it is referenced."""
    from handoffmon.labels import MULTIPROC_ENV

    if not os.environ.get(MULTIPROC_ENV):
        return None
    mirror = FileMirror(collector)
    with contextlib.suppress(Exception):  # monitoring never breaks the runtime being built
        mirror.sync()
    return mirror


def sync_file_mirrors() -> Exception | None:
    """Sync every live ``FileMirror`` of this process; the first failure (the others are still
    synced), else None. Never raises."""
    if not _mirrors:
        return None
    with _mirrors_lock:
        mirrors = list(_mirrors)
    failed: Exception | None = None
    with _sync_lock:
        for mirror in mirrors:
            try:
                mirror.sync(write_gauges=False)
            except Exception as exc:
                failed = failed or exc
        try:
            _write_gauges()  # once, every mirror's gauges combined
        except Exception as exc:
            failed = failed or exc
    return failed


def _fork_prepare() -> None:
    """Before a fork: wait (a write takes ~0.1 ms; at most a second) for a sync in progress."""
    global _sync_held_for_fork
    _sync_held_for_fork = _sync_lock.acquire(timeout=1.0)


def _fork_parent() -> None:
    global _sync_held_for_fork
    if _sync_held_for_fork:
        _sync_held_for_fork = False
        _sync_lock.release()


def _fork_child() -> None:
    global _sync_held_for_fork
    _sync_held_for_fork = False  # the lock itself is renewed (``fork.renew_in_child``)


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(before=_fork_prepare, after_in_parent=_fork_parent, after_in_child=_fork_child)
