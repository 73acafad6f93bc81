"""Shared test helpers for stores: a settable clock and a thread runner that surfaces errors."""

from __future__ import annotations

import threading
from collections.abc import Callable


class FakeClock:
    """A clock tests move by hand (``clock.now += 10``)."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


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
