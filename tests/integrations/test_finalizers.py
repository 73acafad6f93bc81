"""Lock discipline: a dropped stream's finalizer only enqueues; its report runs on a normal stack."""

from __future__ import annotations

import gc
import threading
from typing import Any

from handoffmon.ingress import StreamOutcome
from handoffmon.integrations.streaming import AsyncStream, SyncStream, drain_finalized
from tests.integrations import finalizer_hang


def _chunks() -> list[dict[str, Any]]:
    return [{"choices": [{"delta": {"content": c}}]} for c in "abc"]


def test_a_finalizer_never_runs_the_report_inside_a_lock_its_thread_holds() -> None:
    """The report of a stream dropped while its thread holds the lock the report needs runs
    elsewhere, once the lock is free. (Before: the report ran inside ``__del__`` and waited
    for the lock its own thread held: a deadlock, cut short here by the acquire timeout.)"""
    lock = threading.Lock()
    ran: list[tuple[bool, str, bool]] = []

    def on_done(out: StreamOutcome, inner: Any) -> None:
        got = lock.acquire(timeout=2.0)
        ran.append((got, threading.current_thread().name, out.completed))
        if got:
            lock.release()

    stream: Any = SyncStream(iter(_chunks()), on_done)
    next(stream)
    stream.cycle = stream  # only the cyclic collector frees it
    with lock:
        del stream
        gc.collect()  # the finalizer runs here, on this thread, inside the lock
        held_then = list(ran)
    drain_finalized()
    deadline = threading.Event()
    for _ in range(200):  # the finalizer thread may have taken it first
        if ran:
            break
        deadline.wait(0.01)
    assert held_then == []
    assert len(ran) == 1
    got, _thread, completed = ran[0]
    assert got and completed is False


async def test_async_streams_hand_over_their_report_too() -> None:
    """The async wrapper's finalizer follows the same rule: enqueue, report later, exactly once."""
    seen: list[StreamOutcome] = []

    async def agen() -> Any:
        for c in _chunks():
            yield c

    inner = agen()
    stream: Any = AsyncStream(inner, lambda out, _i: seen.append(out))
    await stream.__anext__()
    del stream
    gc.collect()
    drain_finalized()
    for _ in range(200):
        if seen:
            break
        threading.Event().wait(0.01)
    assert [(o.completed, o.chunks) for o in seen] == [(False, 1)]
    await inner.aclose()


def test_dropped_streams_collected_inside_the_monitor_lock_never_hang_the_router() -> None:
    """4 threads × 8 half-read streams of a real litellm.Router, each freed by the collector
    forced to run inside the aggregates lock, with a 2-slot attribution queue (so reports are
    often drops, which take that lock), each followed by a plain call. Every call returns
    and every dropped stream is reported, as a turn or a counted drop. (Before: the worker
    deadlocked on its own lock within a few calls and every later call blocked.)"""
    status, calls, reported = finalizer_hang.run(4, 8, 60.0)
    assert (status, calls) == ("ok", 64)
    assert reported == 64 + 1  # + the last call, which drained what the finalizers left
