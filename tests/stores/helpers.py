"""Shared test helpers for stores: a thread runner that surfaces errors, and a hung server."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator


def run_in_threads(work: Callable[[int], None], n: int) -> list[BaseException]:
    """Run ``work(i)`` on ``n`` threads at once; returns what any of them raised."""
    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            work(i)
        except BaseException as exc:  # collected for the main thread to assert on
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return errors


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A TCP listener on a loopback port that accepts and never answers (a hung Redis); yields the port."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.05)
    stop = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(srv.getsockname()[1])
    finally:
        stop.set()
        thread.join(1)
        for c in held:
            c.close()
        srv.close()
