"""Shared test helpers for stores: a thread runner that surfaces errors."""

from __future__ import annotations

import threading
from collections.abc import Callable


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
