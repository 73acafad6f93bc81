"""``call_on_loop``: a shadow thread's call on the application's event loop, bounded in time."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from handoffmon.runtime.shadow_calls import ShadowLoopGone, call_on_loop
from handoffmon.shadow.turns import failure_kind


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running on its own thread (as an application's would)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def test_the_coroutine_runs_on_the_loops_thread(loop: asyncio.AbstractEventLoop) -> None:
    """The result comes back to the calling thread; the work ran on the loop's."""

    async def where() -> int | None:
        return threading.get_ident()

    assert call_on_loop(loop, where, 5) not in (None, threading.get_ident())


def test_a_hung_call_times_out_and_is_cancelled_on_the_loop(loop: asyncio.AbstractEventLoop) -> None:
    """A target that never answers: TimeoutError (a breaker failure) after about timeout_s, and the
    task on the loop is cancelled (it holds no connection afterwards)."""
    cancelled = threading.Event()

    async def hang() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    t0 = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        call_on_loop(loop, hang, 0.2)
    assert time.monotonic() - t0 < 2
    assert cancelled.wait(2)
    assert failure_kind(info.value) == "timeout"


def test_a_closed_loop_is_an_error_not_a_target_failure() -> None:
    """The application's loop ended (asyncio.run returned): ShadowLoopGone, classified ``error`` (the
    breaker stays closed), and no coroutine is left un-awaited (warnings are errors here)."""
    closed = asyncio.new_event_loop()
    closed.close()
    made: list[object] = []

    async def never() -> None:  # pragma: no cover - must not run
        made.append(1)

    with pytest.raises(ShadowLoopGone) as info:
        call_on_loop(closed, never, 1)
    assert failure_kind(info.value) == "error" and made == []
