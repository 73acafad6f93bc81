"""The proxy's own Prometheus series (bounded labels)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge

from handoffmon.exporters.prometheus import register_metrics
from handoffmon.pipeline.worker import ByteBudget

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.proxy.upstream import Upstream

ROUTES = ("chat_completions", "responses", "messages", "passthrough", "other")
UNMONITORED_REASONS = (
    "bad_json",
    "no_messages",
    "upstream_status",
    "bad_reply",
    "too_large",
    "truncated",
    "server_state",
    "encoded",
    "unfinished",
    "no_reply",
    "shed",
)
UPSTREAM_ERRORS = ("timeout", "connect", "protocol", "stream", "busy")


def _none() -> int:
    return 0


def _status_class(status: int) -> str:
    return f"{status // 100}xx" if 100 <= status < 600 else "other"


class ProxyMetrics:
    """Counters of ``handoffmon serve`` in an injected registry; children are pre-created.

    Series:
        ``handoffmon_proxy_requests_total{route, status_class}``: answered requests;
        ``route="other"`` includes those the connection answers before the app sees them
        (400 not HTTP, 408 head too slow, 431 head too large: ``server.guarded_protocol``).
        ``handoffmon_proxy_unmonitored_requests_total{reason}``: chat completions, Responses
        API and Anthropic Messages API calls forwarded without monitoring (``bad_json``, ``no_messages``,
        ``upstream_status``, ``bad_reply`` — not JSON, or no reply in it to read (no choice, a
        choice without a message: also ``handoffmon_responses_without_reply_total{status="unreadable"}``,
        as the in-process adapters count it) — ``too_large`` — over
        ``proxy.max_monitored_reply_bytes`` once decoded, or a stream's text past it in
        characters — ``truncated`` — the upstream broke the stream off, the client's
        response was aborted and no turn recorded — ``server_state`` — a Responses API
        request naming a stored history handoffmon cannot find: both ``previous_response_id``
        and ``conversation``, which the API refuses, or a ``conversation`` without an id —
        and ``encoded`` — a request body or JSON reply compressed other than gzip/deflate, or
        corrupt, or an event stream under any ``Content-Encoding`` (forwarded as it came, not
        read); a gzip/deflate request or JSON reply is read from an inflated copy, at most
        ``proxy.max_body_bytes`` (``proxy.max_monitored_reply_bytes``), else ``too_large`` —
        and ``unfinished`` — a ``background=True`` Responses API call answered ``queued`` or
        ``in_progress`` whose reply was not recorded: cancelled, deleted, forgotten past the
        bounds of ``proxy.background`` or expired while parked, or never parked; a parked
        call counts nowhere until then, and not at all once a poll records its turn — and
        ``no_reply`` — an answer, streamed or not, background or not, that finished without a
        reply: a Responses API answer ``failed``, ``cancelled``, or ``incomplete`` with no output
        text and no tool call, a Messages answer refused or cut before any text, a stream of any
        API the upstream ended with an error before any text; also counted by status in
        ``handoffmon_responses_without_reply_total``).
        ``shed`` — a monitored API's request that arrived while ``proxy.max_held_body_bytes``
        of request bodies were held: forwarded as it came, streamed, not read.
        ``handoffmon_proxy_upstream_errors_total{kind}``: ``timeout`` (→ 504),
        ``connect``/``protocol`` (→ 502), ``stream`` (upstream broke off a stream: the
        client's response is aborted too), ``busy`` (no upstream slot within
        ``proxy.upstream_queue_timeout_s`` → 503).
        ``handoffmon_proxy_upstream_requests``, ``handoffmon_proxy_upstream_requests_limit``:
        upstream requests in flight (streams until they end) and
        ``proxy.max_upstream_requests`` (0: no limit), read at scrape time from ``upstream``.
        ``handoffmon_proxy_client_disconnects_total``: clients that left before the end.
        ``handoffmon_proxy_queued_bytes``, ``handoffmon_proxy_queued_bytes_limit``: the request
        and reply bytes turns hold until they are checked, and ``pipeline.max_queued_bytes``
        (read at scrape time from ``queued``): drops while the first nears the second come
        from the byte budget, not a full queue.
        ``handoffmon_proxy_background_calls``: ``background=True`` Responses API calls parked
        until a poll finds them finished (``proxy.background``; at most 256), read at scrape
        time from :attr:`background_calls`.

    Args:
        registry: where the series live.
        queued: the monitor's queued-bytes budget.
        upstream: the upstream pool (its requests in flight), when there is one.
    """

    def __init__(
        self, registry: CollectorRegistry, queued: ByteBudget, upstream: Upstream | None = None
    ) -> None:
        self._requests = Counter(
            "handoffmon_proxy_requests",
            "Requests answered by handoffmon serve, by route and status class.",
            ["route", "status_class"],
            registry=None,
        )
        self._unmonitored = Counter(
            "handoffmon_proxy_unmonitored_requests",
            "Chat, Responses and Messages API calls forwarded unchanged but not monitored, by reason.",
            ["reason"],
            registry=None,
        )
        self._upstream = Counter(
            "handoffmon_proxy_upstream_errors",
            "Upstream failures, by kind.",
            ["kind"],
            registry=None,
        )
        self.disconnects = Counter(
            "handoffmon_proxy_client_disconnects",
            "Clients that disconnected before the response was complete.",
            registry=None,
        )
        held = Gauge(
            "handoffmon_proxy_queued_bytes",
            "Request and reply bytes held by turns not yet checked (pipeline.max_queued_bytes bounds it).",
            registry=None,
        )
        held.set_function(lambda: queued.held)
        limit = Gauge(
            "handoffmon_proxy_queued_bytes_limit",
            "pipeline.max_queued_bytes: the most queued bytes.",
            registry=None,
        )
        limit.set_function(lambda: queued.limit)
        in_flight = Gauge(
            "handoffmon_proxy_upstream_requests",
            "Upstream requests in flight, streams until they end (proxy.max_upstream_requests bounds it).",
            registry=None,
        )
        in_flight.set_function(lambda: upstream.in_flight if upstream is not None else 0)
        most = Gauge(
            "handoffmon_proxy_upstream_requests_limit",
            "proxy.max_upstream_requests: the most upstream requests in flight (0: no limit).",
            registry=None,
        )
        most.set_function(lambda: upstream.max_requests if upstream is not None else 0)
        self.background_calls: Callable[[], int] = _none
        """How many background calls are parked (set by the app once its forwarders exist)."""
        parked = Gauge(
            "handoffmon_proxy_background_calls",
            "Background Responses API calls parked until a poll finds them finished (at most 256).",
            registry=None,
        )
        parked.set_function(lambda: self.background_calls())
        # served without ``_created`` samples, like the exporter's own metrics
        register_metrics(
            registry,
            [
                self._requests,
                self._unmonitored,
                self._upstream,
                self.disconnects,
                held,
                limit,
                in_flight,
                most,
                parked,
            ],
        )
        classes = [f"{c}xx" for c in range(1, 6)]
        self._req_children = {(r, c): self._requests.labels(r, c) for r in ROUTES for c in classes}
        self._unmon_children = {r: self._unmonitored.labels(r) for r in UNMONITORED_REASONS}
        self._up_children = {k: self._upstream.labels(k) for k in UPSTREAM_ERRORS}

    def request(self, route: str, status: int) -> None:
        """Count one answered request."""
        key = (route, _status_class(status))
        child = self._req_children.get(key)
        (child or self._requests.labels(*key)).inc()

    def unmonitored(self, reason: str) -> None:
        """Count one chat completion (or Responses API call) forwarded without monitoring."""
        self._unmon_children[reason].inc()

    def upstream_error(self, kind: str) -> None:
        """Count one upstream failure."""
        self._up_children[kind].inc()
