"""``serve``'s background Responses calls: parked until a poll returns their reply finished.

A ``POST /v1/responses`` with ``background: true`` answers ``queued`` (or ``in_progress``) and
no output; the reply comes with a later ``GET /v1/responses/{id}``. When the upstream answers a
monitored Responses call unfinished, ``serve`` parks the call's turn — its request as forwarded
(the body, parsed for the monitor only when the turn is recorded, as every turn's is) and when
forwarding began — under the response id, in a :class:`handoffmon.runtime.background.Background`
(the wrapped OpenAI client's store: at most 256 calls, each for an hour, 64 MiB of request
bodies together). The park happens on the request path, before the answer goes out, so the
client's first poll always finds it.

A poll of a parked id (``GET /v1/responses/{id}`` and Azure OpenAI's ``/openai/v1/responses/{id}``
and ``/openai/responses/{id}``, not ``?stream=true``) is forwarded as any request; its 2xx JSON
answer goes to the attribution thread, which takes the call out once the response is finished
(any status but ``queued`` / ``in_progress``, read as a ``POST``'s answer would be) and records
the turn with it, latency from the call to that poll: one turn per call whatever the polls
(the take is under a lock). A poll answered with an error status, or not answered, leaves the
call parked. ``POST /v1/responses/{id}/cancel`` and ``DELETE /v1/responses/{id}`` answered 2xx
forget the call.

Counting (``handoffmon_proxy_unmonitored_requests_total{reason}``): a parked call is counted
nowhere while it waits. It becomes either a turn, or — taken by a poll whose answer cannot be
read — ``too_large`` / ``encoded`` / ``bad_reply``, or — cancelled, deleted, pushed out past a
bound, found expired — ``unfinished``; a body that is no monitored request is counted by what it
is (``bad_json``, ``no_messages``, ``server_state``) instead, as for any call. An unfinished
answer that could not be parked (no id, a body past the bound alone) is counted ``unfinished``
at once, as before; a ``serve`` shutting down counts the calls still parked ``unfinished``
(:meth:`BackgroundCalls.close`). So each monitored call is counted once: checked, or
unmonitored. ``handoffmon_proxy_background_calls`` is how many wait.

Fail-open: a failure here is counted in ``handoffmon_monitor_errors_total{stage="integration"}``
and the answer goes out unchanged. A poll landing on another replica finds nothing there and is
only forwarded; the replica that parked the call counts it ``unfinished`` once it expires.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol
from urllib.parse import parse_qsl

from handoffmon.ingress.fields import get
from handoffmon.ingress.responses import unfinished
from handoffmon.runtime.background import Background, Parked

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence

    from handoffmon.pipeline.monitor import Monitor
    from handoffmon.pipeline.records import Built, Capture
    from handoffmon.shadow.turns import ShadowSource


class Turns(Protocol):
    """What the parked calls need of the ``POST /v1/responses`` forwarder
    (``proxy.forward.Forwarder``, which imports this module): its turns are ``forward._Turn``
    (``body``, ``raw_headers``, ``started``), read and counted by it."""

    def document(self, headers: Sequence[tuple[bytes, bytes]], data: bytes) -> Any: ...

    def reply_of(self, doc: Any) -> tuple[Any, dict[str, Any]] | None: ...

    def capture_of(self, turn: Any) -> Capture | None: ...

    def built(
        self,
        turn: Any,
        capture: Capture | None,
        got: tuple[Any, dict[str, Any]] | None,
        headers: Sequence[tuple[bytes, bytes]],
        done: float,
        source: ShadowSource | None,
    ) -> Built | None: ...

    def unread(self, turn: Any, reason: str | None) -> None: ...

    def count_unread(self, turn: Any, reason: str | None) -> None: ...

    def shadow_source(self, turn: Any) -> ShadowSource | None: ...

    def queued_weight(self, body: bytes) -> int: ...


_RESPONSE_PATH = re.compile(r"(?:/v1|/openai/v1|/openai)/responses/([^/]+)(/cancel)?")
"""A response's own path (``{id}``, ``{id}/cancel``) under OpenAI's and Azure OpenAI's prefixes."""

PARKED_OVERHEAD_BYTES = 1024
"""What a parked call keeps alive besides its request body (its headers, the turn object)."""
MAX_COMPRESSED_PARK_READ = 64 * 1024
"""A compressed answer larger than this is not read on the request path to see whether it is
unfinished (an unfinished response has no output: a few kB compressed); it is read as a finished
one, on the attribution thread, and counted ``unfinished`` if it was not."""
_UNFINISHED_TOKENS = (b'"queued"', b'"in_progress"')
"""One of them is in every unfinished response's JSON (its ``status``)."""


class Poll(NamedTuple):
    """A request about a parked call: ``retrieve`` (``GET``) or not (cancel, delete)."""

    response_id: str
    retrieve: bool


def _weight(turn: Any) -> int:
    return len(turn.body) + PARKED_OVERHEAD_BYTES


def _streamed(query: bytes) -> bool:
    """Whether a retrieve asks for an event stream (``?stream=true``): not recorded."""
    if b"stream" not in query:
        return False
    try:
        pairs = parse_qsl(query.decode("latin-1"))
    except Exception:  # pragma: no cover - parse_qsl does not raise on odd input
        return True
    return any(k == "stream" and v.lower() not in ("", "false", "0") for k, v in pairs)


class BackgroundCalls:
    """The monitored Responses forwarder's parked background calls (one per ``serve`` process).

    Args:
        monitor: the runtime's monitor.
        responses: the forwarder of ``POST /v1/responses`` (its turns are parked here; their
            requests are parsed and counted by it).
        clock: monotonic seconds for the store (tests pass their own).
    """

    def __init__(self, monitor: Monitor, responses: Turns, clock: Any = time.monotonic) -> None:
        self._monitor = monitor
        self._responses = responses
        self.calls = Background(_weight, clock=clock, on_drop=self._dropped)

    # -- the POST (request path) --------------------------------------------------------------

    def park(self, turn: Any, headers: Sequence[tuple[bytes, bytes]], data: bytes) -> bool:
        """Park ``turn`` when its 2xx JSON answer ``data`` is an unfinished response; True when
        parked (the caller records nothing now). Only a request mentioning ``background`` (or
        compressed) whose answer can be an unfinished response — it holds ``"queued"`` or
        ``"in_progress"``, or is compressed and small — has its answer parsed here, on the
        request path; never raises."""
        try:
            if b"background" not in turn.body and not _compressed(turn.raw_headers):
                return False
            if _compressed(headers):
                if len(data) > MAX_COMPRESSED_PARK_READ:
                    return False
            elif not any(token in data for token in _UNFINISHED_TOKENS):
                return False
            try:
                doc = self._responses.document(headers, data)
            except Exception:  # unreadable: counted by the usual read of the answer
                return False
            if not unfinished(doc):
                return False
            return self.calls.park(get(doc, "id"), turn, turn.started)
        except Exception as exc:
            self._monitor.errors.failed("integration", exc, "could not park a background call")
            return False

    # -- polls, cancel, delete (request path) -------------------------------------------------

    def poll_of(self, scope: dict[str, Any]) -> Poll | None:
        """The parked call ``scope`` retrieves, cancels or deletes, else ``None`` (forwarded
        only): ``GET`` (not ``?stream=true``), ``POST .../cancel``, ``DELETE`` of a parked id."""
        try:
            if not self.calls:
                return None
            method = scope["method"]
            if method not in ("GET", "POST", "DELETE"):
                return None
            m = _RESPONSE_PATH.fullmatch(scope["path"])
            if m is None or not self.calls.waiting(m.group(1)):
                return None
            cancel = m.group(2) is not None
            if method == "GET" and not cancel:
                return None if _streamed(scope.get("query_string") or b"") else Poll(m.group(1), True)
            if (method == "POST") == cancel:  # POST .../cancel, DELETE .../{id}
                return Poll(m.group(1), False)
            return None
        except Exception as exc:
            self._monitor.errors.failed("integration", exc, "could not read a background poll")
            return None

    def answered(self, poll: Poll, status: int) -> None:
        """A cancel or delete answered ``status``: a 2xx forgets the call."""
        try:
            if 200 <= status < 300:
                self.calls.forget(poll.response_id)
        except Exception as exc:
            self._monitor.errors.failed("integration", exc, "could not forget a background call")

    def polled(self, poll: Poll, status: int, headers: Sequence[tuple[bytes, bytes]], data: bytes) -> None:
        """A retrieve's whole answer: a 2xx is read on the attribution thread (:meth:`_read`)."""
        try:
            if not 200 <= status < 300:  # an upstream error: polled again later
                return
            turn = self.calls.peek(poll.response_id)
            if turn is None:
                return
            # the shadow source is made here, on the serving loop (its calls run there)
            source = self._responses.shadow_source(turn)
            self._monitor.finish_later(
                self._read,
                (poll.response_id, headers, data, time.monotonic(), source),
                # the parked request body is held until checked too, as a POST's reply's
                weight=self._responses.queued_weight(turn.body) + len(data),
                shed=_nothing,  # shed: the call stays parked for the next poll
            )
        except Exception as exc:
            self._monitor.errors.failed("integration", exc, "could not read a background poll")

    def too_large(self, poll: Poll, status: int) -> None:
        """A retrieve answered 2xx past ``proxy.max_monitored_reply_bytes`` (a finished reply,
        an unfinished one has no output): the call's turn is not recorded, counted ``too_large``."""
        try:
            if 200 <= status < 300:
                gone = self.calls.take(poll.response_id)
                if gone is not None:
                    self._responses.unread(gone.ctx, "too_large")
        except Exception as exc:
            self._monitor.errors.failed("integration", exc, "could not read a background poll")

    def close(self) -> None:
        """Shutdown, before the monitor drains: every parked call counted ``unfinished`` (no
        poll will reach this process again)."""
        try:
            self.calls.clear()
        except Exception as exc:  # pragma: no cover - clear does not raise
            self._monitor.errors.failed("integration", exc, "could not count background calls")

    # -- the attribution thread ---------------------------------------------------------------

    def _read(
        self,
        response_id: str,
        headers: Sequence[tuple[bytes, bytes]],
        data: bytes,
        done: float,
        source: ShadowSource | None,
    ) -> Built | None:
        """``Monitor.finish_later``'s build for a retrieve: the parked call's turn once the
        response is finished (taken out: no later poll records it again), else ``None``."""
        responses = self._responses
        try:
            doc = responses.document(headers, data)
        except Exception as exc:  # Unreadable: the turn cannot be recorded from this answer
            gone = self.calls.take(response_id)
            if gone is not None:
                responses.count_unread(gone.ctx, getattr(exc, "reason", "bad_reply"))
            return None
        if unfinished(doc):  # still queued or in progress: polled again later
            return None
        gone = self.calls.take(response_id)
        if gone is None:  # recorded by an earlier poll, forgotten, or expired
            return None
        turn = gone.ctx
        capture = responses.capture_of(turn)
        got = responses.reply_of(doc) if capture is not None else None
        return responses.built(turn, capture, got, headers, done, source)

    def _dropped(self, gone: Parked) -> None:
        """A parked call that leaves without a turn: counted by what its request is, else
        ``unfinished`` (its body parsed on the attribution thread, as any unread request)."""
        try:
            self._responses.unread(gone.ctx, "unfinished")
        except Exception as exc:  # pragma: no cover - finish_later does not raise
            self._monitor.errors.failed("integration", exc, "could not count a background call")


def _nothing() -> None:
    """A poll shed past the queued-bytes budget: nothing to count (the call stays parked)."""


def _compressed(raw_headers: Sequence[tuple[bytes, bytes]]) -> bool:
    for k, v in raw_headers:
        if k.lower() == b"content-encoding" and v.strip().lower() not in (b"", b"identity"):
            return True
    return False
