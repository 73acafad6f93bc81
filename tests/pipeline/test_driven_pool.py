"""A driven check pool: the attribution thread drains the check queue (one worker, no thread of its own)."""

from __future__ import annotations

import threading
from pathlib import Path

from handoffmon.pipeline.monitor import Monitor
from handoffmon.pipeline.worker import DequeWorker, WorkerPool
from tests.pipeline.helpers import RecordingExporter, make_config, monitor, run_conversation


def _chain(
    queue_size: int = 1000, start: bool = True
) -> tuple[DequeWorker[int], WorkerPool[int], list, list]:
    checked: list[tuple[int, str]] = []
    errors: list[BaseException] = []
    dropped: list[int] = []

    def check(i: int) -> None:
        if i == 1013:
            raise RuntimeError("check bug")
        checked.append((i, threading.current_thread().name))

    pool: WorkerPool[int] = WorkerPool(
        check, queue_size=queue_size, on_error=errors.append, driven=True, start=start
    )

    def attribute(i: int) -> None:
        if not pool.submit(1013 if i == 1 else i):
            dropped.append(i)

    front: DequeWorker[int] = DequeWorker(
        attribute, queue_size=1000, on_error=errors.append, name="front", after=pool.drain, start=start
    )
    return front, pool, checked, [errors, dropped]


def test_driven_pool_keeps_order_and_counts_errors_on_the_driver_thread() -> None:
    front, pool, checked, (errors, dropped) = _chain()
    for i in range(200):
        assert front.submit(i)
    assert front.flush(5) and pool.flush(5)
    assert [i for i, _ in checked] == [i for i in range(200) if i != 1]  # 1 became 1013, which raised
    assert {name for _, name in checked} == {"front"}
    assert len(errors) == 1 and not dropped
    assert front.close(5) and pool.close(5)


def test_driven_pool_keeps_its_bound_when_the_driver_runs_ahead() -> None:
    """Not started: the front drains its backlog before the checks, as a separate check
    thread that was never scheduled would have: the third and fourth drop."""
    front, pool, checked, (errors, dropped) = _chain(queue_size=2, start=False)
    for i in (0, 2, 3, 4):
        assert front.submit(i)
    assert front.close(5) and pool.close(5)
    assert [i for i, _ in checked] == [0, 2] and dropped == [3, 4] and not errors


def test_the_driver_attributes_a_waiting_turn_before_the_next_check() -> None:
    """Attribution first: a turn that arrives during a check is attributed before the next
    check, so a check backlog waits in the check queue (as behind a check thread of its own),
    not in the driver's queue; close() then drains both."""
    log: list[str] = []
    errors: list[BaseException] = []

    def check(i: int) -> None:
        log.append(f"c{i}")
        if i == 0:
            assert front.submit(100)  # arrives while the driver checks

    pool: WorkerPool[int] = WorkerPool(
        check, queue_size=1000, on_error=errors.append, driven=True, start=False
    )

    def attribute(i: int) -> None:
        log.append(f"a{i}")
        assert pool.submit(i)

    front: DequeWorker[int] = DequeWorker(
        attribute, queue_size=1000, on_error=errors.append, name="front", after=pool.drain, start=False
    )
    for i in (0, 1, 2):
        assert front.submit(i)
    front.start()
    pool.start()
    assert front.flush(5) and pool.flush(5)
    assert log == ["a0", "a1", "a2", "c0", "a100", "c1", "c2", "c100"] and not errors
    assert front.close(5) and pool.close(5)


class _InlineRecorder(RecordingExporter):
    export_inline = True  # called on the check stage's thread


def test_a_monitor_with_one_worker_runs_its_checks_on_the_attribution_thread() -> None:
    exp = _InlineRecorder()
    seen: list[str] = []
    original = exp.export

    def export(result):  # type: ignore[no-untyped-def]
        seen.append(threading.current_thread().name)
        return original(result)

    exp.export = export  # type: ignore[method-assign]
    before = {t.name for t in threading.enumerate()}
    with monitor(make_config(), exporters=[exp]) as m:
        run_conversation(m, ["a", "b", "a"])
        assert m.flush(10)
        names = {t.name for t in threading.enumerate()} - before
    assert len(exp.results) == 3 and set(seen) == {"handoffmon-attribution"}
    assert not any(n.startswith("handoffmon-worker") for n in names)


def test_several_workers_keep_their_threads() -> None:
    exp = RecordingExporter()
    with monitor(make_config(pipeline={"workers": 2}), exporters=[exp]) as m:
        run_conversation(m, ["a", "b"])
        assert m.flush(10)
        assert any(t.name.startswith("handoffmon-worker") for t in threading.enumerate())
    assert len(exp.results) == 2


def test_a_store_that_waits_on_io_keeps_the_check_thread(tmp_path: Path) -> None:
    """SQLite (and Redis): attribution must not wait while a check waits on the store."""
    exp = RecordingExporter()
    config = make_config(store={"backend": "sqlite", "path": str(tmp_path / "hm.db")})
    with Monitor(config, exporters=[exp]) as m:
        run_conversation(m, ["a", "b"])
        assert m.flush(10)
        assert any(t.name.startswith("handoffmon-worker") for t in threading.enumerate())
    assert len(exp.results) == 2
