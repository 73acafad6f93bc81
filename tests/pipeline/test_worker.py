"""The bounded worker pool: never blocks on submit, keeps per-key order, drains on close."""

from __future__ import annotations

import threading
import time

from handoffmon.pipeline.worker import DequeWorker, WorkerPool


def test_full_queue_refuses_without_blocking() -> None:
    """With the workers not started, a queue of 2 takes 2 items and refuses the third at once."""
    seen: list[int] = []
    pool: WorkerPool[int] = WorkerPool(seen.append, queue_size=2, on_error=lambda e: None, start=False)
    assert pool.submit(1) and pool.submit(2)
    t0 = time.perf_counter()
    assert pool.submit(3) is False
    assert time.perf_counter() - t0 < 0.01
    assert pool.flush() is False  # not started: reports instead of waiting forever
    assert pool.close(5)
    assert seen == [1, 2]


def test_same_key_is_processed_in_order_across_workers() -> None:
    """Items sharing a key land on one worker, so they are handled in submission order."""
    seen: dict[str, list[int]] = {}
    lock = threading.Lock()

    def handle(item: tuple[str, int]) -> None:
        time.sleep(0.0001 if item[1] % 3 else 0)
        with lock:
            seen.setdefault(item[0], []).append(item[1])

    pool: WorkerPool[tuple[str, int]] = WorkerPool(
        handle, workers=4, queue_size=10_000, on_error=lambda e: None
    )
    for i in range(200):
        for key in ("a", "b", "c", "d", "e"):
            assert pool.submit((key, i), key)
    assert pool.flush(10)
    assert all(v == list(range(200)) for v in seen.values())
    assert pool.close(5)


def test_handler_errors_are_reported_and_processing_continues() -> None:
    """A raising handler goes to on_error; later items still run."""
    errors: list[BaseException] = []
    done: list[int] = []

    def handle(i: int) -> None:
        if i == 1:
            raise ValueError("bad item")
        done.append(i)

    pool: WorkerPool[int] = WorkerPool(handle, on_error=errors.append)
    for i in range(3):
        pool.submit(i)
    assert pool.close(5)
    assert done == [0, 2]
    assert [type(e) for e in errors] == [ValueError]


def test_close_times_out_on_a_stuck_handler() -> None:
    """close() returns False (instead of hanging) when a handler never finishes."""
    gate = threading.Event()
    pool: WorkerPool[int] = WorkerPool(lambda i: gate.wait(10), on_error=lambda e: None)
    pool.submit(1)
    t0 = time.perf_counter()
    assert pool.close(0.2) is False
    assert time.perf_counter() - t0 < 2
    gate.set()
    assert pool.submit(2) is False  # closed pools accept nothing


def test_deque_worker_polling_takes_items_without_a_wake_up() -> None:
    """While traffic flows the worker polls: submit only appends (no event set), and the
    item is still handled promptly."""
    seen: list[int] = []
    w: DequeWorker[int] = DequeWorker(
        seen.append, queue_size=10, on_error=lambda e: None, poll_s=0.002, linger_s=30
    )
    try:
        w.submit(1)
        assert w.flush(5)
        time.sleep(0.01)
        w.submit(2)
        assert not w._wake.is_set()  # the request path paid no wake-up
        assert w.flush(5) and seen == [1, 2]
    finally:
        assert w.close(5)


def test_deque_worker_sleeps_after_lingering_and_submit_wakes_it() -> None:
    """After ``linger_s`` without items the worker sleeps untimed; the next submit wakes it."""
    seen: list[int] = []
    w: DequeWorker[int] = DequeWorker(
        seen.append, queue_size=10, on_error=lambda e: None, poll_s=0.001, linger_s=0.01
    )
    try:
        deadline = time.monotonic() + 5
        while not w._sleeping and time.monotonic() < deadline:
            time.sleep(0.005)
        assert w._sleeping
        w.submit(3)
        assert w.flush(5) and seen == [3]
    finally:
        assert w.close(5)


def test_on_idle_runs_when_a_shard_runs_empty_and_every_idle_every_items() -> None:
    """The check pool flushes its aggregates through ``on_idle``: after a burst drains, and
    every ``idle_every`` items while a backlog lasts."""
    gate = threading.Event()
    idles: list[int] = []
    seen: list[int] = []

    def handle(i: int) -> None:
        gate.wait(5)
        seen.append(i)

    pool: WorkerPool[int] = WorkerPool(
        handle, on_error=lambda e: None, on_idle=lambda: idles.append(len(seen)), idle_every=3
    )
    for i in range(7):
        assert pool.submit(i)
    gate.set()
    assert pool.flush(5)
    assert seen == list(range(7))
    assert idles[:2] == [3, 6] and idles[-1] == 7
    assert pool.close(5)
    assert not pool.submit(8)


def test_inline_exporter_runs_on_the_submitting_thread_and_fails_open() -> None:
    """An ``export_inline`` exporter is called by ``submit`` itself; one that raises is counted
    as an export error and the next turn is exported all the same."""
    from handoffmon.pipeline.dispatch import ExporterDispatch

    class Inline:
        export_inline = True

        def __init__(self) -> None:
            self.threads: list[str] = []

        def export(self, result: object) -> bool:
            self.threads.append(threading.current_thread().name)
            if result == "bad":
                raise RuntimeError("boom")
            return result != "false"

        def force_flush(self, timeout_s: float = 5.0) -> bool:
            return True

        def shutdown(self) -> None:
            pass

    errors: list[str] = []
    exp = Inline()
    d = ExporterDispatch(exp, queue_size=4, on_error=lambda s, n=1: errors.extend([s] * n))  # type: ignore[arg-type]
    for r in ("ok", "bad", "false", "ok"):
        d.submit(r)  # type: ignore[arg-type]
    assert exp.threads == [threading.current_thread().name] * 4
    assert errors == ["export", "export"]
    assert d.flush(1)
    d.close(1)


def test_batch_handler_takes_what_queued_in_order_up_to_max_batch() -> None:
    """A batch pool hands over every item queued when it looks, in order, at most
    ``max_batch`` at a time; items in flight count as pending until the batch returns; a
    raising batch is reported and the next batch still runs; on_idle follows a drained batch."""
    gate = threading.Event()
    batches: list[list[int]] = []
    errors: list[BaseException] = []
    idles: list[int] = []
    in_flight: list[int] = []

    def handle(items: list[int]) -> None:
        gate.wait(5)
        in_flight.append(pool.pending())
        batches.append(items)
        if items[0] == 10:
            raise RuntimeError("bad batch")

    pool: WorkerPool[int] = WorkerPool(
        lambda i: None,
        batch=handle,
        max_batch=4,
        on_error=errors.append,
        on_idle=lambda: idles.append(sum(map(len, batches))),
        start=False,
    )
    for i in range(10):
        assert pool.submit(i)
    pool.start()
    gate.set()
    assert pool.flush(5)
    assert batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert in_flight == [10, 6, 2]  # the batch in hand plus what still waits
    assert idles == [10]
    assert pool.submit(10) and pool.submit(11)
    assert pool.flush(5)
    assert [b for b in batches if b[0] >= 10] and [type(e) for e in errors] == [RuntimeError]
    assert sorted(i for b in batches for i in b) == list(range(12))
    assert pool.close(5)


def test_driven_batch_worker_drains_in_batches_on_the_calling_thread() -> None:
    """``run_pending`` on a batch worker: batches on the caller's thread, ``stop`` checked
    before each batch, and the count of items handled."""
    batches: list[list[int]] = []
    w: DequeWorker[int] = DequeWorker(
        lambda i: None,
        batch=batches.append,
        max_batch=3,
        queue_size=100,
        on_error=lambda e: None,
        driven=True,
    )
    for i in range(7):
        assert w.submit(i)
    assert w.run_pending(stop=lambda: len(batches) == 2) == 6
    assert batches == [[0, 1, 2], [3, 4, 5]] and w.pending() == 1
    assert w.run_pending() == 1 and batches[-1] == [6]
    assert w.close(5)
