"""The pass-through ASGI handler: forward bytes unchanged, watch chat completions on the side."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from handoffmon._extras import requires_extra

with requires_extra("proxy", "handoffmon serve"):
    import aiohttp

from handoffmon.ingress import (
    RequestParser,
    describe_response,
    describe_stream,
    reply_message,
    served_by_headers,
)
from handoffmon.ingress.apis import RESPONSES, Api
from handoffmon.ingress.responses import unfinished
from handoffmon.ingress.sse import SSEChunks
from handoffmon.pipeline.records import Built, Capture, Deferred
from handoffmon.pipeline.worker import ByteBudget
from handoffmon.proxy.background import BackgroundCalls, Poll
from handoffmon.proxy.metrics import ProxyMetrics
from handoffmon.proxy.upstream import (
    UnforwardableHeader,
    Upstream,
    UpstreamBusy,
    request_headers,
    response_headers,
)
from handoffmon.shadow.turns import ShadowOffer, ShadowSource, offer_of

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.attribution.names import ModelNames
    from handoffmon.ingress.chunks import StreamOutcome
    from handoffmon.ingress.served import Outcome
    from handoffmon.pipeline.monitor import Monitor
    from handoffmon.routing.body import BodyRouting

_log = logging.getLogger("handoffmon.proxy")

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON_HEADERS = [(b"content-type", b"application/json")]


def error_body(message: str, code: str, kind: str = "handoffmon_proxy_error") -> bytes:
    """An OpenAI-shaped error document (so SDKs surface ``message``)."""
    return json.dumps({"error": {"message": message, "type": kind, "code": code}}).encode()


async def send_json(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    """Send a complete JSON response."""
    hdrs = [*JSON_HEADERS, (b"content-length", str(len(body)).encode()), *(headers or [])]
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": body})


class BodyTooLarge(Exception):
    """The request body exceeds ``proxy.max_body_bytes``."""


class ClientGone(Exception):
    """The client disconnected before its request body was complete."""


class ClientTooSlow(Exception):
    """The client paused inside its request body for longer than ``proxy.client_timeout_s``."""


async def read_body(
    scope: Scope,
    receive: Receive,
    limit: int,
    idle_timeout_s: float | None = None,
    total_timeout_s: float | None = None,
) -> bytes:
    """The whole request body.

    Raises:
        BodyTooLarge: early (by Content-Length) or while reading.
        ClientGone: the client disconnected mid-body.
        ClientTooSlow: no body bytes for ``idle_timeout_s``, or the body not complete
            ``total_timeout_s`` after the first read began.
    """
    for k, v in scope["headers"]:
        if k == b"content-length" and v.isdigit() and int(v) > limit:
            raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    deadline = None if total_timeout_s is None else time.monotonic() + total_timeout_s
    while True:
        wait = idle_timeout_s
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ClientTooSlow
            wait = left if wait is None else min(wait, left)
        msg = await (receive() if wait is None else _receive_within(receive, wait))
        if msg["type"] == "http.disconnect":
            raise ClientGone
        chunk = msg.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not msg.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _reservation(scope: Scope, limit: int) -> list[int] | None:
    """The bytes a request body will hold once read (a one-item list, cut once it is read):
    its ``Content-Length``, else ``limit``; None for a ``Content-Length`` over ``limit``,
    which :func:`read_body` refuses before a byte is read."""
    for k, v in scope["headers"]:
        if k == b"content-length" and v.isdigit():
            n = int(v)
            return None if n > limit else [n]
    return [limit]


def _expire(task: asyncio.Task[Any], expired: list[bool]) -> None:
    expired.append(True)
    task.cancel()


async def _receive_within(receive: Receive, timeout_s: float) -> Message:
    """``receive()`` bounded by ``timeout_s``, else :class:`ClientTooSlow`.

    What ``async with asyncio.timeout(timeout_s)`` does (cancel the task when the timer
    fires; turn that cancellation, and only that one, into the error), with one timer
    handle instead of a ``Timeout`` object and its state machine: a body message is
    usually already buffered, so the timer is armed and cancelled without firing.
    """
    task = asyncio.current_task()
    assert task is not None
    expired: list[bool] = []
    handle = asyncio.get_running_loop().call_later(timeout_s, _expire, task, expired)
    try:
        msg = await receive()
    except asyncio.CancelledError:
        handle.cancel()
        if expired and task.uncancel() == 0:
            raise ClientTooSlow from None
        raise
    handle.cancel()
    if expired:  # fired as receive() returned: the cancellation is ours, undo it
        task.uncancel()
    return msg


@dataclass
class _Turn:
    """A chat completion in flight that may be monitored: the request body is parsed on the
    attribution thread (:meth:`Forwarder.capture_of`), once the reply is finished."""

    body: bytes
    raw_headers: Sequence[tuple[bytes, bytes]]
    """The request's ASGI headers (only the conversation-id headers are read)."""
    started: float
    """``time.monotonic()`` when forwarding began (the call's latency)."""
    received_at: float
    """``time.perf_counter()`` when forwarding began (the parsed request's ``received_at``)."""
    headers: Sequence[tuple[str, str]] = ()
    """The forwarded request headers (a shadow call takes its credentials from them)."""
    parsed: bool = False
    capture: Capture | None = None
    doc: dict[str, Any] | None = None
    """The parsed chat completion body, kept for its shadow offer (shadow continuation on): the
    shadow call repeats its generation parameters (``turns.SHADOW_PARAMS``)."""
    handed_off: bool = False
    """Queued with ``Monitor.finish_later``: parsed (and counted) on the attribution thread."""


DISCONNECT_EXTENSION = "handoffmon.disconnect"
"""ASGI scope extension of ``serve``'s HTTP protocol (``server.guarded_protocol``): the
connection's in-flight :class:`_DisconnectWatch` objects (a dict used as an ordered set, as
ASGI wants extension values to be dicts), each told ``lost()`` when the connection closes.
Under a server without it, each watch runs its own task instead."""


class _DisconnectWatch:
    """Cancels the request task when the client goes away before the response is complete.

    Under ``serve``'s protocol the watch registers with its connection (the scope's
    :data:`DISCONNECT_EXTENSION`), which calls :meth:`lost`; elsewhere it spawns a task
    waiting on ``receive()`` for ``http.disconnect``. The registration saves that task: its
    creation, first step and cancellation cost ~50k instructions per request (issue 21).
    """

    __slots__ = ("_task", "_watch", "_watchers", "disconnected", "done")

    def __init__(self, scope: Scope, receive: Receive, *, watch_receive: bool = True) -> None:
        self.disconnected = False
        self.done = False
        self._task = asyncio.current_task()
        extensions = scope.get("extensions")
        watchers: dict[_DisconnectWatch, None] | None = (
            extensions.get(DISCONNECT_EXTENSION) if extensions is not None else None
        )
        self._watchers = watchers
        self._watch: asyncio.Future[None] | None = None
        if watchers is not None:
            watchers[self] = None
        elif watch_receive:  # not while a streamed upload reads ``receive`` itself
            self._watch = asyncio.ensure_future(self._run(receive))

    async def _run(self, receive: Receive) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                break
        self.lost()

    def lost(self) -> None:
        """The client's connection closed: cancel the request unless it is done."""
        if not self.done and self._task is not None:
            self.disconnected = True
            self._task.cancel()

    def stop(self) -> None:
        self.done = True
        if self._watchers is not None:
            self._watchers.pop(self, None)
        elif self._watch is not None:
            self._watch.cancel()

    def absorb(self) -> bool:
        """After a ``CancelledError``: True (and the cancel undone) if it was our disconnect."""
        if self.disconnected and self._task is not None:
            self._task.uncancel()
            return True
        return False


class Forwarder:
    """ASGI app forwarding one request upstream; ``monitor`` set = a watched chat completion
    (``api`` set: a call of another API read as chat, ``ingress.apis``: the Responses API, the
    Anthropic Messages API).

    Monitoring never blocks or alters traffic: bodies that are not JSON chat requests,
    error statuses and undecodable replies are forwarded unchanged and only counted in
    ``handoffmon_proxy_unmonitored_requests_total{reason}``. With ``routing`` (``routing.enabled``)
    the one change it may make is the order of the ``fallbacks`` a chat request carries.
    With ``shadow`` (``shadow.enabled``) each finished turn is offered for shadow
    continuation through the same upstream (``proxy.shadow``), on the runtime's threads.
    """

    def __init__(
        self,
        upstream: Upstream,
        metrics: ProxyMetrics,
        *,
        max_body_bytes: int,
        monitor: Monitor | None = None,
        route: str = "passthrough",
        client_timeout_s: float | None = None,
        body_timeout_s: float | None = None,
        max_monitored_reply_bytes: int = 16 * 1024 * 1024,
        routing: BodyRouting | None = None,
        shadow: Callable[[Sequence[tuple[str, str]]], ShadowSource | None] | None = None,
        api: Api | None = None,
        background: BackgroundCalls | None = None,
        held: ByteBudget | None = None,
    ) -> None:
        self._upstream = upstream
        self._held = held
        self._api = api
        self._shadow = shadow
        self._routing = routing
        self._metrics = metrics
        self._limit = max_body_bytes
        self._client_timeout = client_timeout_s
        self._body_timeout = body_timeout_s
        self._reply_cap = max_monitored_reply_bytes
        self._monitor = monitor
        self._parser = RequestParser.from_config(monitor.config) if monitor is not None else None
        self._route = route
        self.background = (
            BackgroundCalls(monitor, self) if api is RESPONSES and monitor is not None else background
        )
        """The parked background Responses calls: this forwarder's own (``POST /v1/responses``),
        or the ones the pass-through forwarder's polls, cancels and deletes may concern."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._monitor is None:
            await self._pass(scope, receive, send)
            return
        held = self._held
        reserved = None if held is None else _reservation(scope, self._limit)
        if held is None or reserved is None:  # no budget, or a body refused 413 unread
            await self._read_and_forward(scope, receive, send)
            return
        if not held.take(reserved[0]):
            # the bodies held now would pass proxy.max_held_body_bytes: this one goes upstream
            # as it arrives, unread and unmonitored, instead of adding to them
            self._metrics.unmonitored("shed")
            await self._pass(scope, receive, send)
            return
        try:
            await self._read_and_forward(scope, receive, send, reserved)
        finally:
            held.give(reserved[0])

    async def _read_and_forward(
        self, scope: Scope, receive: Receive, send: Send, reserved: list[int] | None = None
    ) -> None:
        """Read the body whole, then forward it watched. ``reserved``: the bytes taken from
        ``proxy.max_held_body_bytes`` for it, cut to the body's size once it is read (a
        request without ``Content-Length`` took ``proxy.max_body_bytes``)."""
        try:
            body = await read_body(scope, receive, self._limit, self._client_timeout, self._body_timeout)
            if reserved is not None and self._held is not None and reserved[0] > len(body):
                self._held.give(reserved[0] - len(body))
                reserved[0] = len(body)
        except BodyTooLarge:
            self._metrics.request(self._route, 413)
            msg = f"request body exceeds proxy.max_body_bytes ({self._limit} bytes)"
            await send_json(send, 413, error_body(msg, "body_too_large"), [(b"connection", b"close")])
            return
        except ClientTooSlow:
            await self._too_slow(send)
            return
        except ClientGone:
            self._metrics.disconnects.inc()
            return
        headers = await self._headers(scope, send)
        if headers is None:
            return
        if self._routing is not None:  # risk-aware order of the fallbacks the request carries
            body = self._routing.rewrite(body) or body
        turn = (
            _Turn(
                body, scope["headers"], time.monotonic(), time.perf_counter(), headers if self._shadow else ()
            )
            if self._monitor is not None
            else None
        )
        try:
            await self._watched(scope, receive, body, headers, send, turn)
        finally:
            if turn is not None and not turn.parsed and not turn.handed_off:
                # never reached the monitor (upstream error, client gone): a body that is not
                # a chat request is still counted as such
                self.unread(turn, None)

    async def _pass(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A request that is only forwarded: its body goes upstream as it arrives (file
        uploads, audio), never held whole, so ``proxy.max_body_bytes`` does not bound it;
        a client pausing inside it for ``proxy.client_timeout_s`` is answered 408."""
        try:
            first = await (
                receive() if self._client_timeout is None else _receive_within(receive, self._client_timeout)
            )
        except ClientTooSlow:
            await self._too_slow(send)
            return
        if first["type"] == "http.disconnect":
            self._metrics.disconnects.inc()
            return
        headers = await self._headers(scope, send)
        if headers is None:
            return
        body: Any = first.get("body", b"")
        streamed = bool(first.get("more_body", False))
        if streamed:
            for k, v in scope["headers"]:
                if k == b"content-length" and v.isdigit():  # else it goes chunked, as it came
                    headers.append(("Content-Length", v.decode("latin-1")))
                    break
            body = self._upload(body, receive)
        poll = self.background.poll_of(scope) if self.background is not None else None
        await self._watched(scope, receive, body, headers, send, None, watch_receive=not streamed, poll=poll)

    async def _watched(
        self,
        scope: Scope,
        receive: Receive,
        body: Any,
        headers: list[tuple[str, str]],
        send: Send,
        turn: _Turn | None,
        *,
        watch_receive: bool = True,
        poll: Poll | None = None,
    ) -> None:
        """:meth:`_forward`, cancelled (and counted) if the client leaves before the end."""
        watch = _DisconnectWatch(scope, receive, watch_receive=watch_receive)
        try:
            await self._forward(scope, body, headers, send, turn, watch, poll)
        except asyncio.CancelledError:
            if not watch.absorb():
                raise
            self._metrics.disconnects.inc()
        finally:
            watch.stop()

    async def _upload(self, first: bytes, receive: Receive) -> Any:
        """The request body as it arrives (an async iterator for the upstream client).

        Raises (into the upstream client, which ends the request with them as the cause):
            ClientGone: the client disconnected mid-body.
            ClientTooSlow: no body bytes for ``proxy.client_timeout_s``.
        """
        if first:
            yield first
        while True:
            try:
                msg = await asyncio.wait_for(receive(), self._client_timeout)
            except TimeoutError:
                raise ClientTooSlow from None
            if msg["type"] == "http.disconnect":
                raise ClientGone
            chunk = msg.get("body", b"")
            if chunk:
                yield chunk
            if not msg.get("more_body", False):
                return

    async def _too_slow(self, send: Send) -> None:
        self._metrics.request(self._route, 408)
        msg = f"request body stalled for proxy.client_timeout_s ({self._client_timeout} s)"
        if self._body_timeout is not None:
            msg += f" or took longer than proxy.body_timeout_s ({self._body_timeout} s)"
        await send_json(send, 408, error_body(msg, "client_timeout"), [(b"connection", b"close")])

    async def _headers(self, scope: Scope, send: Send) -> list[tuple[str, str]] | None:
        """The headers to forward; ``None`` once a header that cannot be was answered 400."""
        try:
            return request_headers(scope["headers"])
        except UnforwardableHeader as exc:
            self._metrics.request(self._route, 400)
            msg = f"request header {exc.name!r} is not UTF-8: it cannot be forwarded unchanged"
            await send_json(send, 400, error_body(msg, "header_not_utf8", "invalid_request_error"))
            return None

    def capture_of(self, turn: _Turn) -> Capture | None:
        """The turn's parsed request; ``None`` (counted as unmonitored) when the body is not a
        chat request.

        ``serve`` forwards the body's bytes unchanged and parses them for the monitor only, on
        the attribution thread (:meth:`_read_json`, :meth:`_read_stream`,
        :meth:`count_unread`): nothing of it is on the request path (``begin_s`` 0)."""
        if turn.parsed:
            return turn.capture
        turn.parsed = True
        body = turn.body
        if _encoding(turn.raw_headers) is not None:  # a compressed request: read a copy
            try:
                body = _decoded(turn.raw_headers, body, self._limit)
            except ReplyTooLarge:  # inflates past proxy.max_body_bytes
                self._skip("too_large")
                return None
            except (ValueError, zlib.error):  # br, zstd, … or corrupt
                self._skip("encoded")
                return None
            # Queued at its compressed weight: parsed, it must still fit the whole budget (a
            # 30 KB gzip body inflates to 10 MiB of empty objects, ~0.9 GB once parsed)
            if self._monitor is not None and parsed_weight(body) > self._monitor.queued_bytes.limit:
                self._skip("too_large")
                return None
        try:
            doc = loads(body)
        except (ValueError, RecursionError):  # RecursionError: absurdly nested JSON
            self._skip("bad_json")
            return None
        assert self._parser is not None
        try:  # conversation headers only
            link = None
            if self._api is not None:  # another API's body, read as chat
                doc, skip, link = self._api.read_request(doc)
                if doc is None:
                    self._skip(skip or "no_messages")
                    return None
            request = self._parser.http_body(doc, turn.raw_headers, received_at=turn.received_at)
            if request is not None and link is not None:
                request = request._replace(link=link)
        except Exception:  # the parser is total; should it ever raise, the turn goes unmonitored
            self._parse_failed()
            return None
        if request is None:
            self._skip("no_messages")
            return None
        turn.capture = Capture(request, 0.0)
        if self._shadow is not None and self._api is None:  # a chat body, parsed here only
            turn.doc = doc
        return turn.capture

    def unread(self, turn: _Turn, reason: str | None) -> None:
        """A request with no reply to record (an error status, a compressed or cut-off stream,
        no answer at all): counted ``unmonitored{reason}`` when its body is a chat request,
        else by what the body is (``bad_json``, ``no_messages``). The body is read on the
        attribution thread, within the queued-bytes budget (a flood of large bodies the
        upstream refuses is not parsed on the serving loop); past the budget it is counted
        ``reason`` unread."""
        assert self._monitor is not None
        turn.handed_off = True
        self._monitor.finish_later(
            self.count_unread,
            (turn, reason),
            weight=self.queued_weight(turn.body),
            shed=(lambda: self._skip(reason)) if reason is not None else _nothing,
        )

    def count_unread(self, turn: _Turn, reason: str | None) -> None:
        """:meth:`unread`'s build (attribution thread): counts the request; nothing to record."""
        if self.capture_of(turn) is not None and reason is not None:
            self._skip(reason)

    def queued_weight(self, body: bytes) -> int:
        """A queued request body's weight: :func:`parsed_weight` from
        :data:`WEIGHED_BODY_BYTES` up or while turns back up, else its raw bytes (at most
        ``UNWEIGHED_TURNS`` such turns wait beside the budget: ~21 MiB parsed at worst)."""
        n = len(body)
        if n >= WEIGHED_BODY_BYTES or (n > 1024 and self._monitor is not None and self._monitor.backlogged()):
            return parsed_weight(body)
        return n

    def shadow_source(self, turn: _Turn) -> ShadowSource | None:
        """The turn's shadow source when the runtime runs shadow continuation (on the serving
        loop: its calls run there)."""
        return self._shadow(turn.headers) if self._shadow is not None else None

    def _offer(self, turn: _Turn, capture: Capture, source: ShadowSource | None) -> ShadowOffer | None:
        """The turn's shadow offer, from its ``source``; a chat completion's repeats the generation
        parameters of its body (``turn.doc``: parsed on the attribution thread, nobody else's)."""
        messages = capture.request.messages
        if source is None or not messages:
            return None
        return offer_of(source, messages, capture.request.link, self._api is not None, turn.doc)

    def _parse_failed(self) -> None:
        """Monitoring a turn raised: the traffic is unaffected, the turn is counted unmonitored."""
        assert self._monitor is not None
        self._monitor.count_error("parse")
        self._skip("bad_reply")

    def _skip(self, reason: str) -> None:
        self._metrics.unmonitored(reason)

    async def _forward(
        self,
        scope: Scope,
        body: Any,
        headers: list[tuple[str, str]],
        send: Send,
        turn: _Turn | None,
        watch: _DisconnectWatch,
        poll: Poll | None = None,
    ) -> None:
        """Forward the request; ``poll``: a request about a parked background call (the pass-through
        forwarder's), whose answer goes to ``self.background``."""
        path = scope.get("raw_path") or scope["path"].encode()
        path_s = path.decode("latin-1") if isinstance(path, bytes) else path
        slots = self._upstream.slots
        if not slots.try_take():
            try:
                await slots.take()
            except UpstreamBusy:
                most = self._upstream.max_requests
                await self._upstream_error(
                    send,
                    503,
                    "busy",
                    f"all {most} upstream requests (proxy.max_upstream_requests) stayed in flight "
                    "for proxy.upstream_queue_timeout_s",
                )
                return
        try:
            async with self._upstream.request(
                scope["method"], path_s, scope["query_string"], headers, body
            ) as resp:
                status = resp.status
                out_headers = response_headers(resp.raw_headers, status)
                if poll is not None and self.background is not None and not poll.retrieve:
                    self.background.answered(poll, status)  # a cancel or delete: forgets the call
                    poll = None
                if (
                    self._monitor is not None or poll is not None
                ) and resp.content_type != "text/event-stream":
                    n = resp.content_length
                    if n is not None and n <= self._reply_cap:  # the usual reply: read whole
                        got: bytes | list[bytes] = await resp.read()
                    else:
                        got = [] if n is not None else await _read_upto(resp, self._reply_cap)
                    if isinstance(got, list):  # past proxy.max_monitored_reply_bytes: not held whole
                        if turn is not None:
                            self.unread(turn, "too_large")
                        if poll is not None and self.background is not None:
                            self.background.too_large(poll, status)
                        await self._stream(resp, status, out_headers, send, None, watch, got)
                        return
                    data = got
                elif self._monitor is None and _small(resp):
                    # a small, complete body (JSON replies): read whole, sent in one message
                    try:
                        data = await resp.read()
                    except (TimeoutError, aiohttp.ClientError):
                        await send({"type": "http.response.start", "status": status, "headers": out_headers})
                        self._broke_off(status, watch)
                        return
                else:
                    # other unmonitored bodies (files, audio) and event streams pass chunk by chunk
                    await self._stream(resp, status, out_headers, send, turn, watch)
                    return
        except (TimeoutError, aiohttp.ServerTimeoutError):
            await self._upstream_error(
                send, 504, "timeout", "upstream did not answer within proxy.upstream_timeout_s"
            )
            return
        except aiohttp.ClientConnectorError:
            await self._upstream_error(send, 502, "connect", "cannot connect to the upstream")
            return
        except aiohttp.ClientError as exc:
            cause = exc.__cause__
            if isinstance(cause, ClientGone):  # a streamed upload the client abandoned
                self._metrics.disconnects.inc()
                return
            if isinstance(cause, ClientTooSlow):
                await self._too_slow(send)
                return
            await self._upstream_error(
                send, 502, "protocol", f"upstream request failed: {type(exc).__name__}: {_short(exc)}"
            )
            return
        else:
            if turn is not None:
                # before the body goes out (costs tens of µs): once a client holds the reply the
                # monitor has it too, so /admin/flush and the next turn on any replica see it
                try:
                    self._finish_json(turn, status, out_headers, data)
                except Exception:  # monitoring is on the side: the reply goes out regardless
                    self._parse_failed()
            elif poll is not None and self.background is not None:  # never raises
                self.background.polled(poll, status, out_headers, data)
            await send({"type": "http.response.start", "status": status, "headers": out_headers})
            watch.done = True
            await send({"type": "http.response.body", "body": data})
            self._metrics.request(self._route, status)
        finally:  # the slot is held until the response is done with (streams included)
            slots.give()

    async def _upstream_error(self, send: Send, status: int, kind: str, message: str) -> None:
        self._metrics.upstream_error(kind)
        self._metrics.request(self._route, status)
        await send_json(send, status, error_body(message, f"upstream_{kind}"))

    async def _stream(
        self,
        resp: aiohttp.ClientResponse,
        status: int,
        headers: list[tuple[bytes, bytes]],
        send: Send,
        turn: _Turn | None,
        watch: _DisconnectWatch,
        head: Sequence[bytes] = (),
    ) -> None:
        """Pass the body through chunk by chunk (after ``head``, what was already read of it);
        an event stream is also parsed, on the side.

        Parsing never touches or delays the bytes: the first exception it raises stops
        parsing for this reply (``monitor_errors{stage="parse"}``, unmonitored
        ``bad_reply``) and the stream carries on. An upstream that breaks off (connection
        reset, incomplete chunked body, read timeout) makes the client's response break
        off too, and the turn is not recorded: the client did not receive a reply.
        """
        if turn is not None and (not 200 <= status < 300 or _encoding(headers) is not None):
            # not read: an error status, or a compressed event stream (forwarded as it came and
            # counted ``encoded``: what the upstream sent is not judged, as for a request body)
            self.unread(turn, "upstream_status" if not 200 <= status < 300 else "encoded")
            turn = None
        # The request is parsed once the stream has ended, on the attribution thread
        # (_read_stream): until then the reply is folded whatever the body holds.
        sse = (
            SSEChunks(
                max_chars=self._reply_cap,
                folder=self._api.folder(self._reply_cap) if self._api is not None else None,
            )
            if turn is not None
            else None
        )
        await send({"type": "http.response.start", "status": status, "headers": headers})
        for chunk in head:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        pending = sse is not None and turn is not None
        try:
            async for chunk in resp.content.iter_any():
                if pending and sse is not None and turn is not None:
                    pending = self._parse_chunk(turn, headers, sse, chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except (TimeoutError, aiohttp.ClientError):
            if pending and turn is not None:
                self.unread(turn, "truncated")
            self._broke_off(status, watch)
            return
        except BaseException:  # client gone (cancelled): the client saw a partial reply
            if pending and sse is not None and turn is not None:
                self._finish_stream_safely(turn, headers, sse, False)
            raise
        if pending and sse is not None and turn is not None:  # ended without [DONE]
            self._finish_stream_safely(turn, headers, sse, True)
        watch.done = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        self._metrics.request(self._route, status)

    def _broke_off(self, status: int, watch: _DisconnectWatch) -> None:
        """The upstream broke off a response that has started: abort the client's.

        Returning without the final body message makes uvicorn close the connection, so
        the client sees the same cut-off a direct call would.
        """
        self._metrics.upstream_error("stream")
        self._metrics.request(self._route, status)
        watch.done = True
        _log.warning("handoffmon serve: the upstream broke off a response; aborting the client's")

    def _parse_chunk(
        self, turn: _Turn, headers: list[tuple[bytes, bytes]], sse: SSEChunks, chunk: bytes
    ) -> bool:
        """Feed one upstream chunk to the parser; False once the turn is finished or parsing failed."""
        try:
            sse.feed(chunk)
            if sse.done:  # "[DONE]" is in this chunk: record before the client can see it
                return not self._finish_stream(turn, headers, sse, True)
            return True
        except Exception:
            self._parse_failed()
            return False

    def _finish_stream_safely(
        self, turn: _Turn, headers: list[tuple[bytes, bytes]], sse: SSEChunks, completed: bool
    ) -> None:
        try:
            self._finish_stream(turn, headers, sse, completed)
        except Exception:
            self._parse_failed()

    def _finish_json(self, turn: _Turn, status: int, headers: list[tuple[bytes, bytes]], data: bytes) -> None:
        if not 200 <= status < 300:
            self.unread(turn, "upstream_status")
            return
        assert self._monitor is not None
        if (
            self._api is RESPONSES
            and self.background is not None
            and self.background.park(turn, headers, data)
        ):
            turn.handed_off = True  # background=True: recorded from the poll that finds it finished
            return
        # The request path only queues the bytes (the ~20-40 µs of parsing both bodies run on
        # the attribution thread, in order with every other turn), within the monitor's
        # pipeline.max_queued_bytes: a flood of large bodies is shed, not held.
        turn.handed_off = True
        self._monitor.finish_later(
            self._read_json,
            (turn, headers, data, time.monotonic(), self.shadow_source(turn)),
            weight=self.queued_weight(turn.body) + len(data),
        )

    def _read_json(
        self,
        turn: _Turn,
        headers: list[tuple[bytes, bytes]],
        data: bytes,
        done: float,
        source: ShadowSource | None,
    ) -> Built | None:
        """``Monitor.finish_later``'s build for a JSON reply (attribution thread): the parsed
        request and reply, or ``None`` when either is not monitored (counted)."""
        capture = self.capture_of(turn)
        got = self._reply(headers, data) if capture is not None else None
        return self.built(turn, capture, got, headers, done, source)

    def built(
        self,
        turn: _Turn,
        capture: Capture | None,
        got: tuple[Any, dict[str, Any]] | None,
        headers: Sequence[tuple[bytes, bytes]],
        done: float,
        source: ShadowSource | None,
    ) -> Built | None:
        """A JSON reply's turn: its parsed request, its reply document and message (``got``:
        :meth:`reply_of`), the call's latency to ``done``; ``None`` when either is missing."""
        if capture is None or got is None:
            return None
        assert self._monitor is not None
        doc, reply = got
        return (
            capture,
            reply,
            Deferred(_describe_response, (self._monitor.names, doc, headers)),
            done - turn.started,
            self._offer(turn, capture, source),
        )

    def _reply(self, headers: list[tuple[bytes, bytes]], data: bytes) -> tuple[Any, dict[str, Any]] | None:
        """The reply document and its assistant message; ``None`` (counted) when unreadable."""
        try:
            doc = self.document(headers, data)
        except Unreadable as exc:
            self._skip(exc.reason)
            return None
        return self.reply_of(doc)

    def document(self, headers: Sequence[tuple[bytes, bytes]], data: bytes) -> Any:
        """The reply's parsed JSON body.

        Raises:
            Unreadable: with its ``unmonitored`` reason (``too_large``, ``encoded``, ``bad_reply``).
        """
        try:
            decoded = _decoded(headers, data, self._reply_cap)
        except ReplyTooLarge:
            raise Unreadable("too_large") from None
        except (ValueError, zlib.error):  # br, zstd, … or corrupt: not read, as a request body
            raise Unreadable("encoded") from None
        try:
            return loads(decoded)
        except (ValueError, RecursionError):
            raise Unreadable("bad_reply") from None

    def reply_of(self, doc: Any) -> tuple[Any, dict[str, Any]] | None:
        """A parsed reply document (read as chat) and its assistant message; ``None`` (counted)
        when it is no reply."""
        if self._api is not None:
            if self._api is RESPONSES and unfinished(doc):  # background=True: the reply comes later
                self._skip("unfinished")
                return None
            doc = self._api.as_chat(doc)
            assert self._monitor is not None
            if self._monitor.no_reply(doc):  # finished without a reply (failed): counted, no turn
                self._skip("no_reply")
                return None
        reply = reply_message(doc)
        if not isinstance(reply, dict):  # no choice, or no message: counted as in-process adapters count it
            assert self._monitor is not None
            self._monitor.count_no_reply("unreadable")
            self._skip("bad_reply")
            return None
        return doc, reply

    def _finish_stream(
        self, turn: _Turn, headers: list[tuple[bytes, bytes]], sse: SSEChunks, completed: bool
    ) -> bool:
        """Hand a streamed reply to the monitor (read on the attribution thread, as a JSON
        reply); always True (the turn is finished)."""
        sse.close()
        assert self._monitor is not None
        out = sse.outcome(completed=completed)
        turn.handed_off = True
        self._monitor.finish_later(
            self._read_stream,
            (turn, headers, out, sse.events, time.monotonic(), self.shadow_source(turn)),
            streamed=True,
            weight=self.queued_weight(turn.body) + _reply_chars(out.reply),
        )
        return True

    def _read_stream(
        self,
        turn: _Turn,
        headers: list[tuple[bytes, bytes]],
        out: StreamOutcome,
        events: int,
        done: float,
        source: ShadowSource | None,
    ) -> Built | None:
        """``Monitor.finish_later``'s build for a folded stream (attribution thread): its
        request parsed, or ``None`` when it is not monitored (counted)."""
        capture = self.capture_of(turn)
        if capture is None:
            return None
        if events == 0:
            self._skip("bad_reply")
            return None
        assert self._monitor is not None
        monitor = self._monitor
        if out.odd:
            monitor.count_error("parse", out.odd)
        if out.too_large:  # past proxy.max_monitored_reply_bytes characters: nothing was kept
            self._skip("too_large")
            return None
        if out.no_reply is not None:  # finished without a reply (response.failed): no turn
            monitor.count_no_reply(out.no_reply)
            self._skip("no_reply")
            return None
        return (
            capture,
            out.reply,
            Deferred(_describe_stream, (monitor.names, out, headers)),
            done - turn.started,
            self._offer(turn, capture, source),
        )


PARSED_OBJECT_BYTES = 256
"""What one JSON object of a request body keeps alive once parsed on the attribution thread:
the dict, its keys and short values (tracemalloc: 245 bytes for ``{"role":"user","content":""}``
read by ``loads``, 253 with the request parser's copy; 305 with 11 characters of text). A
body of 340,000 empty messages is 9.9 MB raw and 83 MB parsed."""
WEIGHED_BODY_BYTES = 64 * 1024
"""Request bodies from this size up always weigh their parsed objects too
(:func:`parsed_weight`); smaller ones only while turns back up (``Monitor.backlogged``), so the
usual request path skips the count (~0.7 ns a byte)."""


def parsed_weight(body: bytes) -> int:
    """The weight a queued request body takes from ``pipeline.max_queued_bytes``: its raw bytes
    plus :data:`PARSED_OBJECT_BYTES` per JSON object (``{``: braces inside strings count too,
    erring on the heavy side), since once parsed the turn keeps both alive until it is checked.
    Counting the braces of a 10 MB body takes ~7 ms."""
    return len(body) + PARSED_OBJECT_BYTES * body.count(b"{")


def _nothing() -> None:
    """A request without a reply or a reason, shed past the budget: nothing to count."""


def _reply_chars(reply: dict[str, Any]) -> int:
    """Characters of a folded reply's text and tool-call arguments (what it holds while queued)."""
    n = 0
    for key in ("content", "refusal"):
        value = reply.get(key)
        if type(value) is str:
            n += len(value)
    for call in reply.get("tool_calls") or ():
        n += len(call["function"]["arguments"])
    return n


def _describe_response(names: ModelNames, doc: Any, headers: Sequence[tuple[bytes, bytes]]) -> Outcome:
    """``describe_response`` with the served-by headers read there too (attribution thread)."""
    return describe_response(names, doc, served_by_headers(headers))


def _describe_stream(names: ModelNames, out: StreamOutcome, headers: list[tuple[bytes, bytes]]) -> Outcome:
    """``describe_stream`` with the served-by headers read there too (attribution thread)."""
    return describe_stream(names, out, served_by_headers(headers))


_DIGITS = bytes(48 if 48 <= i <= 57 else 32 for i in range(256))
"""``bytes.translate`` table: digits stay, every other byte becomes a space."""
_LONG_RUN = b"0" * 19


def loads(data: bytes) -> Any:
    """``json.loads(data)``, parsed by orjson whenever that gives the same objects.

    orjson is 3-5x faster (a 2 KB chat request: ~3 vs ~10 us) and strict: whatever it
    refuses (NaN/Infinity, lone surrogates, UTF-16/32 or a BOM, nesting past 1024,
    numbers out of float range, invalid JSON) goes to ``json.loads``, which then
    accepts or raises exactly as before. The one input orjson accepts differently,
    integers beyond 64 bits (read as floats), needs 19 or more digits in a row: such
    bodies go to ``json.loads`` directly.
    """
    if _LONG_RUN in data.translate(_DIGITS):
        return json.loads(data)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


async def _read_upto(resp: aiohttp.ClientResponse, cap: int) -> bytes | list[bytes]:
    """A body of unknown length: whole when it is at most ``cap`` bytes, else the chunks read so
    far (past ``cap``: the caller passes the rest through without holding it)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_any():
        chunks.append(chunk)
        size += len(chunk)
        if size > cap:
            return chunks
    return b"".join(chunks)


def _short(exc: BaseException) -> str:
    """An upstream client error's message for the client, first line, at most 200 characters:
    aiohttp's messages name limits and states, not bodies; a response error's own message
    only (its ``str`` also holds the upstream URL)."""
    text = exc.message if isinstance(exc, aiohttp.ClientResponseError) else str(exc)
    lines = str(text).splitlines()
    return lines[0][:200] if lines else ""


SMALL_BODY_BYTES = 64 * 1024
"""Un-monitored replies up to this ``Content-Length`` (and not event streams) are read whole."""


def _small(resp: aiohttp.ClientResponse) -> bool:
    n = resp.content_length
    return n is not None and n <= SMALL_BODY_BYTES and resp.content_type != "text/event-stream"


def _encoding(headers: Sequence[tuple[bytes, bytes]]) -> bytes | None:
    for k, v in headers:
        if k.lower() == b"content-encoding" and v.strip().lower() not in (b"", b"identity"):
            return v.strip().lower()
    return None


class Unreadable(Exception):
    """A reply the monitor cannot read; ``reason``: how it is counted ``unmonitored``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ReplyTooLarge(Exception):
    """The (decoded) reply exceeds ``proxy.max_monitored_reply_bytes``: not monitored."""


def _decoded(headers: Sequence[tuple[bytes, bytes]], data: bytes, cap: int) -> bytes:
    """The body for the monitor (a reply, or a compressed request): gzip/deflate undone on a
    copy, at most ``cap`` bytes of output.

    Raises:
        ReplyTooLarge: the body, or what it decompresses to, is larger than ``cap``
            (a 200 KB gzip reply can expand to hundreds of MiB: never decompressed whole).
        ValueError: an encoding other than gzip/deflate.
        zlib.error: a corrupt compressed body.
    """
    enc = _encoding(headers)
    if enc is None:
        if len(data) > cap:
            raise ReplyTooLarge
        return data
    if enc in (b"gzip", b"x-gzip"):
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif enc == b"deflate":
        d = zlib.decompressobj()
    else:
        raise ValueError(f"unsupported content-encoding {enc!r}")
    out = d.decompress(data, cap + 1)
    if len(out) > cap:
        raise ReplyTooLarge
    return out
