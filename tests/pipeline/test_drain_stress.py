"""Stress: every submitted turn is processed or counted as dropped, and a check backlog waits
in the check queue (``pipeline.queue_size``), not in the attribution queue.

The slow demo tests once counted 1,703 of 2,224 turns with the attribution thread draining
the check queue (one check worker): it drained the whole check queue every 32 attributed
turns, so a check backlog piled up in the 1,000-slot attribution queue instead of the
10,000-slot check queue, and overflowed it. Those turns were shed and counted
(``attribution_overflows``), not lost; the burst test below reproduces that in about a
second and pins the fix (the driving thread attributes first, checks when no turn waits).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from handoffmon.pipeline.monitor import Monitor
from handoffmon.testing import RecordingExporter
from handoffmon.types import TurnResult
from tests.pipeline.helpers import make_config, monitor, run_conversation


class _SlowInlineCheck(RecordingExporter):
    """Runs on the check thread (``export_inline``) and burns ``cost_s`` of CPU per turn: a
    slow check, not a blocked one (a blocked check would stall any thread that runs it)."""

    export_inline = True

    def __init__(self, cost_s: float) -> None:
        super().__init__()
        self.cost_s = cost_s

    def export(self, result: TurnResult) -> bool:
        end = time.perf_counter() + self.cost_s
        while time.perf_counter() < end:
            pass
        return super().export(result)


def _accounted(m: Monitor) -> tuple[int, int]:
    snap = m.snapshot()
    return snap.total_turns, snap.dropped


def _conversations(m: Monitor, first: int, n: int, turns: int = 2) -> int:
    for k in range(first, first + n):
        run_conversation(m, ["a", "b"][:turns], user=f"hello {k}")
    return n * turns


@pytest.mark.parametrize("workers", [1, 2])
def test_a_check_backlog_waits_in_the_check_queue_not_the_attribution_queue(workers: int) -> None:
    """A paced stream that attribution keeps up with but the checks do not: 400 turns in
    about 0.6 s, checks of 5 ms each. The backlog (~280 turns) exceeds the attribution queue
    (200) but not the check queue (10,000): nothing may be dropped. Draining the whole check
    queue every 32 attributed turns shed about 80-200 of them here. Paced loosely (attribution
    needs ~7 % of a core) so a loaded CI host still keeps up; ``workers=2`` is the design with
    check threads of their own (three threads share the GIL there)."""
    check = _SlowInlineCheck(0.005)
    config = make_config(pipeline={"attribution_queue_size": 200, "queue_size": 10_000, "workers": workers})
    with monitor(config, exporters=[check]) as m:
        submitted, pace, t0 = 0, 0.0015, time.perf_counter()
        for k in range(200):
            submitted += _conversations(m, k, 1)
            delay = t0 + submitted * pace - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        assert m.flush(30)
        processed, dropped = _accounted(m)
        assert (processed, dropped, m.attribution_overflows) == (submitted, 0, 0)
        assert len(check.results) == submitted


def test_every_submitted_turn_is_processed_or_counted_as_dropped_while_flush_races() -> None:
    """Four submitters overrun small queues while another thread keeps calling flush();
    after each round (submitters joined) flush() is True and processed + dropped == submitted."""
    check = _SlowInlineCheck(0.0002)
    config = make_config(pipeline={"attribution_queue_size": 40, "queue_size": 60})
    with monitor(config, exporters=[check]) as m:
        stop = threading.Event()
        flushes: list[bool] = []

        def flusher() -> None:
            while not stop.is_set():
                flushes.append(m.flush(0.01))

        racer = threading.Thread(target=flusher)
        racer.start()
        submitted = 0
        try:
            for round_ in range(3):
                counts = [0] * 4

                def submit(i: int, round_: int = round_, counts: list[int] = counts) -> None:
                    counts[i] = _conversations(m, 1000 * (10 * round_ + i), 60)

                threads = [threading.Thread(target=submit, args=(i,)) for i in range(4)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                submitted += sum(counts)
                assert m.flush(30)
                processed, dropped = _accounted(m)
                assert processed + dropped == submitted, (round_, processed, dropped, submitted)
                assert processed == len(check.results)
                assert m.stats["pending"] == 0
        finally:
            stop.set()
            racer.join()
        assert flushes  # the racer ran
        _, dropped = _accounted(m)
        assert dropped > 0  # the queues did overflow: the accounting was exercised


def test_close_racing_submitters_counts_every_turn() -> None:
    """close() while four threads still submit: turns after the close are dropped and
    counted, turns before it are processed (before the exporters close) or counted."""
    check = _SlowInlineCheck(0.0001)
    config = make_config(pipeline={"attribution_queue_size": 100, "queue_size": 100})
    m = monitor(config, exporters=[check])
    counts = [0] * 4
    started = threading.Barrier(5)

    def submit(i: int) -> None:
        started.wait()
        counts[i] = _conversations(m, 1000 * i, 150)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    started.wait()
    time.sleep(0.02)
    m.close(30)
    for t in threads:
        t.join()
    processed, dropped = _accounted(m)
    assert processed + dropped == sum(counts), (processed, dropped, sum(counts))
    assert processed == len(check.results)  # every processed turn reached the exporter
    snap: Any = m.snapshot()
    assert not snap.monitor_errors.get("pipeline")  # drained within the budget
