"""Under PROMETHEUS_MULTIPROC_DIR a quiet worker's scrape-time gauges keep moving: the files were
written only after a turn, a shadow pair or a refit, so with no traffic a worker's routing table
age stopped growing in a multiprocess ``/metrics`` and RoutingTableStale could not fire on a quiet
worker whose refits stopped. ``FileRefresher`` writes them on a timer; the table's timestamp gives
the age at query time."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from handoffmon.exporters.file_refresh import FileRefresher
from tests.exporters.test_file_gauges import scrape
from tests.exporters.turns import L, only
from tests.exporters.workers import ROOT


def test_an_idle_workers_table_age_grows_in_a_multiprocess_scrape(tmp_path: Path) -> None:
    """A real worker process counts one turn and then stays idle; a ``MultiProcessCollector``
    over its directory shows its table age growing between two scrapes, the table's timestamp
    fixed at its refit time; the exporter's ``shutdown`` stops the timer."""
    created = time.time() - 7200.0
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "tests.exporters.mp_idle_worker", repr(created), "0.05"]
    with subprocess.Popen(
        argv, env=env, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            assert proc.stdout.readline().strip().isdigit()  # ready: one turn written
            first = only(scrape(tmp_path), "handoffmon_routing_table_age_seconds")[L()]
            time.sleep(0.5)
            s = scrape(tmp_path)
            later = only(s, "handoffmon_routing_table_age_seconds")[L()]
            assert later - first >= 0.3  # it froze at the turn's value before
            assert 7200.0 <= later < 7260.0
            assert only(s, "handoffmon_routing_table_timestamp_seconds") == {L(): pytest.approx(created)}
            proc.stdin.close()
            assert proc.stdout.readline().strip() == "stopped"
        finally:
            proc.kill()


@pytest.mark.slow  # a real worker process: ~1.2 s each
@pytest.mark.parametrize(
    ("argv", "turns", "want"),
    [(["0.02"], 1, ">= 5"), (["3600", "turn"], 2, "== 1")],
    ids=["timer", "check-thread"],
)
def test_a_failing_write_of_the_files_counts_a_monitor_error(
    tmp_path: Path, argv: list[str], turns: int, want: str
) -> None:
    """A real worker whose multiprocess directory is taken away (a tmp cleaner; the same as one
    it may not write): each write of its files fails to create the file its routing table's
    timestamp needs, and each failure is counted in ``handoffmon_monitor_errors_total{stage=
    "export"}`` in the files it still holds open, so MonitorErrors sees it (it was only logged).
    ``timer``: no turn meanwhile, every ``FileRefresher`` tick counts one. ``check-thread``: the
    timer never ticks; one turn and its flush write the files once, one error."""
    mp_dir, moved = tmp_path / "mp", tmp_path / "moved"
    mp_dir.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(mp_dir), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "tests.exporters.mp_unwritable_worker", *argv]
    export = L(stage="export")
    with subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            assert proc.stdout.readline().strip().isdigit()  # one turn written
            assert only(scrape(mp_dir), "handoffmon_monitor_errors_total")[export] == 0
            mp_dir.rename(moved)
            mp_dir.write_text("not a directory")  # no file can be created under it
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "routing"

            def errors() -> float:
                return only(scrape(moved), "handoffmon_monitor_errors_total")[export]

            if want == "== 1":
                time.sleep(0.2)  # nothing else writes: the count stays at the one failure
                assert errors() == 1
            else:
                assert _wait(lambda: errors() >= 5), errors()
            assert sum(only(scrape(moved), "handoffmon_turns_total").values()) == turns
            assert "handoffmon_routing_table_timestamp_seconds" not in {n for n, _ in scrape(moved)}
        finally:
            proc.kill()


class Syncs:
    """A ``sync`` that counts its calls (and can fail)."""

    def __init__(self) -> None:
        self.n = 0
        self.fail: Exception | None = None
        self.called = threading.Event()

    def __call__(self) -> Exception | None:
        self.n += 1
        self.called.set()
        return self.fail


class Owner:
    """Something that holds the refresher (an exporter in the package)."""


def _wait(cond: Any, timeout_s: float = 2.0) -> bool:
    end = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


def test_the_thread_runs_while_an_owner_holds_it() -> None:
    """One thread for any number of owners; it stops at the last release, and starts again at
    a later hold."""
    syncs = Syncs()
    r = FileRefresher(syncs, interval_s=0.01)
    a, b = Owner(), Owner()
    r.hold(a)
    thread = r._thread
    r.hold(b)
    r.hold(a)
    assert r._thread is thread and r.running
    assert syncs.called.wait(2)
    r.release(a)
    assert r.running
    r.release(b)
    assert not r.running and thread is not None and not thread.is_alive()
    n = syncs.n
    time.sleep(0.05)
    assert syncs.n == n
    r.hold(a)
    assert r.running
    r.release(a)
    assert not r.running


def test_the_thread_ends_when_its_owners_are_collected() -> None:
    """An exporter dropped without ``shutdown`` does not leave the thread running forever."""
    r = FileRefresher(Syncs(), interval_s=0.01)
    owner = Owner()
    r.hold(owner)
    del owner
    gc.collect()
    assert _wait(lambda: not r.running)


def test_a_failing_sync_is_logged_once_per_run_of_failures(caplog: pytest.LogCaptureFixture) -> None:
    """A collector failing every few seconds does not flood the log."""
    syncs = Syncs()
    syncs.fail = RuntimeError("disk full")
    r = FileRefresher(syncs, interval_s=0.005)
    owner = Owner()
    r.hold(owner)
    assert _wait(lambda: syncs.n >= 5)
    r.release(owner)
    logged = [rec for rec in caplog.records if "disk full" in rec.getMessage()]
    assert len(logged) == 1, logged


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_runs_its_own_thread() -> None:
    """A ``gunicorn --preload`` worker forked while the parent's timer runs has a timer of its own."""
    syncs = Syncs()
    r = FileRefresher(syncs, interval_s=0.01)
    owner = Owner()
    r.hold(owner)
    try:
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            os.close(rfd)
            n = syncs.n
            ok = r.running and _wait(lambda: syncs.n >= n + 3)
            os.write(wfd, json.dumps({"ok": ok}).encode())
            os._exit(0)
        os.close(wfd)
        with os.fdopen(rfd) as f:
            said = json.loads(f.read())
        os.waitpid(pid, 0)
        assert said == {"ok": True}
    finally:
        r.release(owner)
