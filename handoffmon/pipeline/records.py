"""The immutable records handed between pipeline stages (request path → attribution → checks).

NamedTuples on purpose: they are built on the request path, where a frozen dataclass's
``__init__`` costs several µs more, and they are never mutated — each stage builds the
next record instead of filling in the previous one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from handoffmon.ingress import Outcome, Request
from handoffmon.shadow.turns import ShadowOffer
from handoffmon.types import TurnContext


class Capture(NamedTuple):
    """What ``Monitor.capture`` keeps of a request until its reply arrives.

    Attributes:
        request: the parsed request (its message list is a snapshot of the caller's).
        begin_s: request-path time from the start of parsing to the end of ``capture``.
    """

    request: Request
    begin_s: float

    def __repr__(self) -> str:  # no message content in reprs (they reach logs)
        return f"Capture({self.request!r})"


class Deferred(NamedTuple):
    """An ``Outcome`` to read later, on the attribution thread: ``describe(*args)``.

    Reading a response's metadata (deployment, fallbacks, usage) then costs the request
    path nothing; ``describe`` must only read what it is given.
    """

    describe: Callable[..., Outcome]
    args: tuple[Any, ...]


class Finished(NamedTuple):
    """A reply handed to ``Monitor.finish``: queued for the attribution stage.

    Attributes:
        capture: the request's capture.
        reply: the assistant message (taken at finish time; the application may edit its
            response afterwards).
        outcome: who served it, or how to find out later.
        streamed: the reply was streamed.
        latency_s: wall time of the call (to the end of the stream).
        finished_at: wall clock when the reply finished.
        finish_s: request-path time ``finish`` took.
        shadow: the integration's offer of a shadow continuation (``None``: shadow off).
        weight: bytes of its own the turn holds (``Monitor.queued_bytes``), given back once
            it is checked, or when it goes no further.
    """

    capture: Capture
    reply: Any
    outcome: Outcome | Deferred
    streamed: bool
    latency_s: float
    finished_at: float
    finish_s: float
    shadow: ShadowOffer | None = None
    weight: int = 0

    def __repr__(self) -> str:
        return f"Finished({self.capture!r}, streamed={self.streamed})"


Built = tuple[Capture, Any, Outcome | Deferred, float, ShadowOffer | None]
"""What a ``Later.build`` returns: the capture, reply, outcome, latency and shadow offer
(``None``: none) ``Monitor.finish`` would have been given."""


class Later(NamedTuple):
    """A call handed to ``Monitor.finish_later``: everything but the timing is read later.

    ``build(*args)`` runs on the attribution thread and returns the turn's ``Built`` record
    (or ``None``: nothing to record), so the request path only keeps references to what the
    call was given and returned.

    Attributes:
        build: reads the call (parses the request, copies the reply) on the attribution thread.
        args: what ``build`` reads; the integration snapshots what the application may change
            (the message list, the reply text) before queueing.
        finished_at: wall clock when the reply finished.
        finish_s: request-path time ``finish_later`` took.
        streamed: the reply was streamed.
        weight: bytes ``args`` hold (as ``Finished.weight``).
    """

    build: Callable[..., Built | None]
    args: tuple[Any, ...]
    finished_at: float
    finish_s: float
    streamed: bool = False
    weight: int = 0

    def __repr__(self) -> str:  # no message content in reprs (they reach logs)
        return "Later()"


class Attributed(NamedTuple):
    """A turn after the attribution stage: handed to the checks.

    Attributes:
        ctx: the attributed context (degraded when attribution failed).
        recorded: the reply's fingerprints to persist (``None`` if recording failed).
        reply_text: the text the checkers see.
        outcome: who served it, authors canonical (``unknown`` when nothing named one).
        streamed: the reply was streamed.
        latency_s: wall time of the call.
        finished_at: wall clock when the reply finished.
        begin_s: request-path time of ``capture`` (with parsing).
        finish_s: request-path time of ``finish``.
        shadow: the integration's offer of a shadow continuation (``None``: shadow off).
        tools_only: the reply only calls tools (no text): its rules are ``not_applicable``.
        weight: the queued-bytes budget the turn holds (``Finished.weight``), given back once
            it is checked.
    """

    ctx: TurnContext
    recorded: Any
    reply_text: str
    outcome: Outcome
    streamed: bool
    latency_s: float
    finished_at: float
    begin_s: float
    finish_s: float
    shadow: ShadowOffer | None = None
    tools_only: bool = False
    weight: int = 0

    def __repr__(self) -> str:
        return f"Attributed(depth={self.ctx.depth}, authors={self.outcome.authors!r})"
