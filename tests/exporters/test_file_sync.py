"""Under PROMETHEUS_MULTIPROC_DIR the scrape-time counters (store failures, routing decisions,
shadow calls) are written to the files on a check thread's idle turn, at most every
``FILE_SYNC_S`` while turns keep coming, not after every turn (that cost 81-103 µs a turn);
the end-to-end sums over real worker processes are in ``test_serving``."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from handoffmon.exporters import prometheus
from handoffmon.exporters.prometheus import FILE_SYNC_S, PrometheusExporter
from handoffmon.pipeline.monitor import Monitor
from handoffmon.protocols import IdleObserver
from handoffmon.testing import make_turn_result
from tests.pipeline.helpers import make_config, run_conversation


class Clock:
    """A fake clock for the exporter and the times at which it wrote the files."""

    def __init__(self) -> None:
        self.now = 100.0
        self.writes: list[float] = []


@pytest.fixture()
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(prometheus, "_now", lambda: c.now)
    monkeypatch.setattr(prometheus, "sync_file_mirrors", lambda: c.writes.append(c.now))
    return c


def test_a_busy_thread_writes_the_files_at_most_every_file_sync_s(clock: Clock) -> None:
    exp = PrometheusExporter(CollectorRegistry(), multiprocess=True)
    assert isinstance(exp, IdleObserver)
    for _ in range(200):
        assert exp.export(make_turn_result())
    assert clock.writes == [100.0]  # the first turn's, then none for 200 turns within a second
    exp.idle()  # the queue ran empty: what the turns since added
    exp.idle()  # nothing new: nothing written
    assert clock.writes == [100.0, 100.0]
    clock.now += FILE_SYNC_S / 2
    exp.export(make_turn_result())
    assert len(clock.writes) == 2
    clock.now += FILE_SYNC_S
    exp.export(make_turn_result())  # a second since the last write: written on the turn
    assert clock.writes == [100.0, 100.0, 101.5]
    exp.export(make_turn_result())
    assert exp.force_flush() is True  # shutdown writes what is left
    assert clock.writes == [100.0, 100.0, 101.5, 101.5]


def test_without_multiprocess_nothing_is_written(clock: Clock) -> None:
    exp = PrometheusExporter(CollectorRegistry(), multiprocess=False)
    exp.export(make_turn_result())
    exp.idle()
    exp.force_flush()
    assert clock.writes == []


def test_the_monitor_calls_idle_when_its_checks_run_out_of_turns(clock: Clock) -> None:
    """Through a real monitor: turns in a burst, then the check thread's idle turn writes the
    files once more after the burst's first write, before ``flush`` returns."""
    exp = PrometheusExporter(CollectorRegistry(), multiprocess=True)
    with Monitor(make_config(), exporters=[exp]) as m:
        for i in range(20):
            run_conversation(m, ["gpt", "gpt"], user=f"hello {i}")
        assert m.flush(30)
        assert len(clock.writes) >= 2  # the first turn's write and at least one idle write
        assert not exp._files_dirty  # everything counted is in the files
