"""Extension points as Protocols: attribution stores, exporters, clocks."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from handoffmon.errors import CorruptValue
from handoffmon.types import TurnResult


@dataclass(frozen=True, slots=True)
class Authorship:
    """What a store keeps per produced assistant message (the value of a fingerprint key).

    Attributes:
        authors: canonical authors, in order (usually one).
        depth: depth of the turn that produced the message.
        created_at: wall-clock seconds when it was recorded.
        conversation_id: conversation that produced it (``""`` = unknown or ambiguous).
            The memory store evicts a conversation's keys together by it; the attributor
            keeps a derived conversation id stable across truncated histories with it.

    An entry with no ``authors`` is a collision marker: the key was recorded for
    different authors, so it attributes nothing. ``depth`` 0 = ambiguous depth.
    """

    authors: tuple[str, ...]
    depth: int
    created_at: float
    conversation_id: str = ""


@runtime_checkable
class AttributionStore(Protocol):
    """Fingerprint → authorship, plus small per-conversation state blobs.

    Batch calls so a networked store (Redis) costs O(1) round trips per request.
    Implementations must be safe to call from several threads, and raise ``StoreError``
    (``StoreTimeout``, ``CorruptValue`` with the readable part) when the backend fails;
    the pipeline runs every store behind ``stores.GuardedStore``, which counts those
    failures and fails open.
    """

    def get_many(self, keys: Sequence[str]) -> list[Authorship | None]:
        """Look up fingerprints; ``None`` where unknown or expired."""
        ...

    def put_many(self, items: Sequence[tuple[str, Authorship]]) -> None:
        """Record fingerprints (overwriting)."""
        ...

    def get_state(self, conversation_id: str) -> Mapping[str, object] | None:
        """Per-conversation state (last verdicts, extracted answers, declared rules)."""
        ...

    def put_state(self, conversation_id: str, state: Mapping[str, object]) -> None:
        """Replace a conversation's state (JSON-serializable mapping)."""
        ...

    def close(self) -> None:
        """Release connections/files."""
        ...


Merge = Callable[[Authorship | None, Authorship], Authorship]
"""How a write combines with what is stored: (stored value or ``None``, new value) → value."""


def merge_authorship(old: Authorship | None, new: Authorship) -> Authorship:
    """What a key should hold after ``new`` is recorded over ``old``.

    Different authors for one key (the same short reply by two models, or two identical
    histories answered by different models) turn it into a collision marker (no
    authors), which attributes nothing from then on. Same authors at different depths
    keep the authors with depth 0 (unknown); different conversations keep the authors
    with no conversation id. Markers and unknowns are sticky.
    """
    if old is None:
        return new
    if not old.authors or old.authors != new.authors:
        return Authorship((), 0, new.created_at, "")
    depth = new.depth if old.depth == new.depth else 0
    conversation_id = new.conversation_id if old.conversation_id == new.conversation_id else ""
    if depth == new.depth and conversation_id == new.conversation_id:
        return new
    return Authorship(new.authors, depth, new.created_at, conversation_id)


def merge_by_read_write(
    store: AttributionStore, items: Sequence[tuple[str, Authorship]], merge: Merge
) -> None:
    """``merge_many`` for any store: ``get_many`` of the keys, then ``put_many`` of
    ``merge(stored value, new value)`` per key (what a store without a native merge does).

    Raises:
        CorruptValue: some stored values were unreadable; they were merged as absent and
            written all the same (``partial`` is ``None``).
    """
    try:
        existing = store.get_many([k for k, _ in items])
        unreadable = None
    except CorruptValue as exc:  # the readable part, unreadable values as None
        existing, unreadable = exc.partial, exc  # type: ignore[assignment]
    store.put_many([(k, merge(old, new)) for (k, new), old in zip(items, existing, strict=True)])
    if unreadable is not None:
        raise CorruptValue(f"{unreadable} (merged as absent and overwritten)", partial=None)


@runtime_checkable
class Exporter(Protocol):
    """Receives every finished turn from the background pipeline.

    ``export`` must not raise; it returns False on failure (the pipeline counts it).
    """

    def export(self, result: TurnResult) -> bool:
        """Export one turn's results."""
        ...

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Flush buffered data."""
        ...

    def shutdown(self) -> None:
        """Flush and release resources."""
        ...


@runtime_checkable
class MonitorObserver(Protocol):
    """Optional exporter extension: the pipeline pushes its own health into it.

    The pipeline calls these on every exporter that implements them (check with
    ``isinstance(exporter, MonitorObserver)``). This push is the ONE way handoffmon's own
    error, drop and overhead figures reach telemetry (it also works under
    ``PROMETHEUS_MULTIPROC_DIR``); exporters never read ``Counts``. Must not raise.
    """

    def observe_overhead(self, stage: str, seconds: float) -> None:
        """Record how long a monitoring stage took (hot-path and background stages)."""
        ...

    def count_error(self, stage: str) -> None:
        """Count one of handoffmon's own failures in ``stage``."""
        ...

    def count_drop(self, n: int = 1) -> None:
        """Count turns dropped because the background queue was full."""
        ...


@runtime_checkable
class IdleObserver(Protocol):
    """Optional exporter extension: ``idle()`` is called on a check thread when its queue runs
    empty (and every ``idle_every`` turns under load), for work worth batching over turns
    rather than doing per turn. Must not raise, must not block."""

    def idle(self) -> None:
        """Do the batched work now."""
        ...


@runtime_checkable
class ShadowPairObserver(Protocol):
    """Optional exporter extension: shadow pairs' counter increments (``Counts.shadow``).

    ``Monitor.count_shadow`` pushes each recorded pair's increments (names already capped
    by the shared guard) into every exporter that implements this, as it does into the
    aggregates, so a refit from Prometheus or SQLite reads the same pairs. Must not raise.
    """

    def count_shadow(self, increments: Mapping[Any, int]) -> None:
        """Add one shadow pair's increments (``counts.ShadowKey`` → n) to the exported counters."""
        ...


@runtime_checkable
class NoReplyObserver(Protocol):
    """Optional exporter extension: responses that finished without a reply.

    ``Monitor.count_no_reply`` calls it (on the adapter's thread: the request path, or the
    attribution thread) for each Responses API answer ``failed``, ``cancelled`` or
    ``incomplete`` with no output, which is no turn (``ingress.responses.NoReply``). Must not
    raise, must not block.
    """

    def count_no_reply(self, status: str) -> None:
        """Count one response that finished in ``status`` without a reply."""
        ...


@runtime_checkable
class CompositeExporter(Protocol):
    """Optional exporter extension: exporters that must run beside this one.

    ``OTelExporter`` counts on the check thread and its ``events`` emit the spans and events
    on a thread of their own: two exporters, one thing to the user. ``Monitor.add_exporter``
    registers each companion not registered yet, before the exporter itself (so at close the
    companions drain before it flushes), and never registers one exporter twice: passing the
    ``OTelExporter`` alone, or with its ``events`` in any order, registers both once.
    """

    @property
    def companions(self) -> tuple[Exporter, ...]:
        """The exporters to register with this one."""
        ...


class Clock(Protocol):
    """Injectable time source (tests pass a fake)."""

    def __call__(self) -> float:
        """Seconds (wall clock for stores, monotonic for latencies)."""
        ...
