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


async def test_flush_and_close_count_the_turns_of_dropped_streams() -> None:
    """A stream the application stops reading and drops (sync or async, through a real Router)
    is a turn by the time ``runtime.flush()`` returns, every time, and ``close()`` right after
    the drop records it too. (Before: the report waited in the finalizer queue for the
    finalizer thread, and flush returned without it in about half the tries — 10 of 20 in
    the audit — while close lost every one.)"""
    from handoffmon.integrations import wrap
    from handoffmon.runtime import build_runtime
    from handoffmon.testing import RecordingExporter
    from tests.integrations.routers import fallback_router
    from tests.pipeline.helpers import make_config

    config = make_config()
    router = fallback_router()
    exp = RecordingExporter()
    rt = build_runtime(config, registry=None, exporters=[exp])
    try:
        wrapped = wrap(router, runtime=rt)
        for i in range(20):
            messages = [{"role": "user", "content": f"drop {i}"}]
            if i % 2:
                astream = await wrapped.acompletion(model="backup", messages=messages, stream=True)
                await astream.__anext__()
                del astream
            else:
                stream = wrapped.completion(model="backup", messages=messages, stream=True)
                next(stream)
                del stream
            assert rt.flush(10)
            assert len(exp.results) == i + 1
        assert all(r.record.streamed and r.record.author == "openai/gpt-b" for r in exp.results)
    finally:
        rt.close()
    for i in range(5):
        exp = RecordingExporter()
        rt = build_runtime(config, registry=None, exporters=[exp])
        stream = wrap(router, runtime=rt).completion(
            model="backup", messages=[{"role": "user", "content": f"close {i}"}], stream=True
        )
        next(stream)
        del stream
        rt.close()
        assert len(exp.results) == 1
