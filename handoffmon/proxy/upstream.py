"""Pooled upstream HTTP client (aiohttp): byte-exact pass-through, timeouts, hop-by-hop filtering."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from handoffmon._extras import requires_extra

with requires_extra("proxy", "handoffmon serve"):
    import aiohttp
    from yarl import URL

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
    }
)
"""Headers that describe one connection, never forwarded in either direction (RFC 9110 §7.6.1)."""

_NOT_FORWARDED_UP = HOP_BY_HOP | {b"host", b"content-length", b"expect"}
"""``host`` and ``content-length`` are recomputed by the client for the upstream request;
``expect: 100-continue`` was answered to the client already (uvicorn sends ``100 Continue``
when the body is first read): forwarded, the upstream client would hold the body back until
the upstream sent ``100 Continue`` too, and against one that waits for the body instead
(RFC 9110 §10.1.1 lets it) the request hung until ``proxy.upstream_timeout_s``."""

_NO_BODY_DROP = HOP_BY_HOP | {b"content-length"}

SessionFactory = Callable[[], aiohttp.ClientSession]

MAX_RESPONSE_HEAD_FIELD = 64 * 1024
"""Longest upstream status line or header field accepted (aiohttp's default, 8,190 bytes, would
answer a 502 for a reply a direct client reads: h11, under httpx and the OpenAI SDK, allows a
16 KiB head; Node.js 16 KiB; LiteLLM and gateways add headers)."""


def split_base(upstream: str) -> tuple[str, str]:
    """``(origin, base_path)`` of the upstream URL; a trailing ``/v1`` is dropped.

    The proxy appends the client's path (``/v1/chat/completions``) to the base path, so
    both ``http://router:4000`` and ``http://router:4000/v1`` mean the same thing.

    Raises:
        ValueError: the URL is not ``http(s)://host[:port][/path]``.
    """
    parts = urlsplit(upstream)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"upstream must be an http(s) URL, got {upstream!r}")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return f"{parts.scheme}://{parts.netloc}", path


class UnforwardableHeader(ValueError):
    """A request header value that is not UTF-8: the upstream client cannot send its bytes unchanged."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _connection_named(raw: list[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """Header names listed in ``Connection:`` (also hop-by-hop, RFC 9110 §7.6.1)."""
    named = {
        token.strip().lower()
        for k, v in raw
        if k.lower() == b"connection"
        for token in v.split(b",")
        if token.strip()
    }
    return frozenset(named)


def request_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """Client request headers to send upstream: all but hop-by-hop (incl. those named in
    ``Connection:``), ``host``, ``content-length``.

    Values are decoded as UTF-8, which is how the upstream client encodes them again, so
    the bytes the upstream receives are the bytes the client sent (non-ASCII included).
    Auth headers (``authorization``, ``api-key``, ``x-api-key``) are forwarded as they are.

    Raises:
        UnforwardableHeader: a value is not valid UTF-8 (it could not be sent unchanged).
    """
    raw = list(raw)
    drop = _NOT_FORWARDED_UP
    for k, _ in raw:
        if k.lower() == b"connection":  # rare on a keep-alive request: one more pass
            drop = drop | _connection_named(raw)
            break
    out: list[tuple[str, str]] = []
    for k, v in raw:
        if k.lower() in drop:
            continue
        try:
            out.append((k.decode("latin-1"), v.decode("utf-8")))
        except UnicodeDecodeError:
            raise UnforwardableHeader(k.decode("latin-1")) from None
    return out


def response_headers(raw: Iterable[tuple[bytes, bytes]], status: int = 200) -> list[tuple[bytes, bytes]]:
    """Upstream response headers to send to the client, byte-exact, minus hop-by-hop
    (incl. those named in ``Connection:``).

    A 204 or 304 has no body whatever its ``content-length`` says (RFC 9110 §8.6: a 304 may
    carry the length a 200 would have had): that header is dropped, as uvicorn would take
    it as a promise of body bytes, raise, and drop the client's connection."""
    raw = list(raw)
    drop = HOP_BY_HOP if status not in (204, 304) else _NO_BODY_DROP
    for k, _ in raw:
        if k.lower() == b"connection":
            drop = drop | _connection_named(raw)
            break
    return [(k, v) for k, v in raw if k.lower() not in drop]


def default_session_factory(timeout_s: float) -> SessionFactory:
    """A factory of pooled sessions that leave bodies exactly as the upstream sent them.

    ``auto_decompress=False`` keeps compressed bodies byte-identical (the
    ``content-encoding`` header stays true); the timeout bounds each wait for upstream
    bytes (connect, response headers, and every read of a stream). The connector sets no
    limit of its own: :class:`Upstream` bounds the requests in flight, and a request waiting
    for a connection would otherwise wait unseen and without a time bound.
    """

    def make() -> aiohttp.ClientSession:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s, sock_read=timeout_s)
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, enable_cleanup_closed=True)
        return aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept", "Content-Type"),
            cookie_jar=aiohttp.DummyCookieJar(),
            max_line_size=MAX_RESPONSE_HEAD_FIELD,
            max_field_size=MAX_RESPONSE_HEAD_FIELD,
        )

    return make


class UpstreamBusy(Exception):
    """Every upstream slot stayed taken for ``proxy.upstream_queue_timeout_s``."""


class Slots:
    """At most ``limit`` requests in flight (0: no limit); a request past it waits, first come
    first served, up to ``timeout_s`` for one to end. Single event loop, no locks."""

    __slots__ = ("_waiters", "limit", "timeout_s", "used")

    def __init__(self, limit: int, timeout_s: float) -> None:
        self.limit = limit
        self.timeout_s = timeout_s
        self.used = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    def try_take(self) -> bool:
        """Take a free slot if there is one (no waiting: the request path's usual case)."""
        if not self.limit or (self.used < self.limit and not self._waiters):
            self.used += 1
            return True
        return False

    async def take(self) -> None:
        """Take a slot, waiting if none is free.

        Raises:
            UpstreamBusy: none became free within ``timeout_s``.
        """
        if self.try_take():
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await asyncio.wait_for(fut, self.timeout_s)
        except TimeoutError:
            if fut in self._waiters:
                self._waiters.remove(fut)
            raise UpstreamBusy from None
        except asyncio.CancelledError:  # the client left while waiting
            if fut in self._waiters:
                self._waiters.remove(fut)
            elif fut.done() and not fut.cancelled():  # handed a slot as it was cancelled
                self.give()
            raise

    def give(self) -> None:
        """Give a slot back: to the longest waiter, else to the pool."""
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # the slot passes on: ``used`` stays
                return
        self.used -= 1


class Upstream:
    """One pooled client for one upstream base URL; created and closed inside the event loop.

    Args:
        url: upstream base URL (``http://router:4000`` or ``…/v1``).
        timeout_s: see :func:`default_session_factory`.
        max_requests: requests in flight at most (``proxy.max_upstream_requests``; 0: no
            limit), streams until they end; past it a request waits up to ``queue_timeout_s``
            (``proxy.upstream_queue_timeout_s``) for one to end, else :class:`UpstreamBusy`.
        session_factory: builds the ``aiohttp.ClientSession`` (tests inject their own).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float,
        max_requests: int = 1024,
        queue_timeout_s: float = 5.0,
        session_factory: SessionFactory | None = None,
    ) -> None:
        self.origin, self.base_path = split_base(url)
        self._factory = session_factory or default_session_factory(timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self.slots = Slots(max_requests, queue_timeout_s)
        """Taken by each request for as long as its response is read (``Slots.take``, ``give``)."""

    @property
    def in_flight(self) -> int:
        """Requests holding a slot now (waiting ones not included)."""
        return self.slots.used

    @property
    def max_requests(self) -> int:
        """The most requests in flight (0: no limit)."""
        return self.slots.limit

    async def start(self) -> None:
        """Open the connection pool (must run inside the serving event loop)."""
        if self._session is None:
            self._session = self._factory()

    @property
    def started(self) -> bool:
        """Whether the pool is open."""
        return self._session is not None and not self._session.closed

    def url_for(self, path: str, query: bytes) -> str:
        """Upstream URL of a client request path (raw, already percent-encoded) and query."""
        url = f"{self.origin}{self.base_path}{path}"
        return f"{url}?{query.decode('latin-1')}" if query else url

    def request(
        self, method: str, path: str, query: bytes, headers: list[tuple[str, str]], body: Any
    ) -> aiohttp.client._RequestContextManager:
        """Send one request; use as ``async with upstream.request(...) as resp``, holding one of
        :attr:`slots` (taken before, given back after: a plain ``try``/``finally`` costs the
        request path less than a context manager of its own).

        ``body``: bytes, or an async iterable of bytes (a streamed upload: give its
        ``content-length`` in ``headers`` when the client did, else it goes chunked).
        """
        if self._session is None:
            raise RuntimeError("Upstream.start() was not awaited")
        return self._session.request(
            method,
            URL(self.url_for(path, query), encoded=True),
            headers=headers,
            data=body or None,
            allow_redirects=False,
            compress=None,
        )

    async def close(self) -> None:
        """Close the pool."""
        if self._session is not None:
            await self._session.close()
            self._session = None
