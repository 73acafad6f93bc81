"""Reproduce CPython gh-148891: GC inside ``ContextVar.set`` runs a finalizer that sets a ContextVar.

Not a test (it crashes the interpreter it finds the bug in). Run:
``PYTHONMALLOC=debug python -X faulthandler -m tests.reliability.hamt_repro``
— on CPython 3.10/3.11 it segfaults in ``ContextVar.set`` within seconds (freed HAMT
nodes are poisoned by the debug allocator); on 3.12+ it prints ``survived``. The
finalizer here is a generator's ``finally``; in LiteLLM 1.108.7 it is
``CustomStreamWrapper.__del__`` (see docs/operations/known-issues.md).

``--safe-points`` runs the same loop the way ``handoffmon.sim.driver`` drives LiteLLM on
3.11: automatic collection off, the collections the thresholds call for run between
iterations (``collect_at_safe_point``); it survives.
"""

from __future__ import annotations

import contextlib
import contextvars
import gc
import sys
from collections.abc import Callable, Iterator

VAR = contextvars.ContextVar[int]("var")
PADS = [contextvars.ContextVar[object](f"pad{i}") for i in range(64)]  # a multi-level HAMT


def _holds_the_var() -> Iterator[None]:
    token = VAR.set(1)
    try:
        yield
    finally:  # runs when the garbage collector finalizes the abandoned generator
        with contextlib.suppress(ValueError):
            VAR.reset(token)


def main(iterations: int = 2_000_000, *, safe_points: bool = False) -> None:
    from handoffmon.sim.driver import _safe_point_gc, collect_at_safe_point

    for pad in PADS:
        pad.set(object())
    gc.set_threshold(5)  # collect often, so some collections start inside ContextVar.set
    with _safe_point_gc() if safe_points else contextlib.nullcontext():
        _loop(iterations, collect_at_safe_point if safe_points else None)
    print("survived", iterations, "iterations on", sys.version.split()[0])


def _loop(iterations: int, safe_point: Callable[[], None] | None) -> None:
    for i in range(iterations):
        gen = _holds_the_var()
        next(gen)
        cycle: list[object] = [gen]
        cycle.append(cycle)  # only the cyclic collector can free it
        del gen, cycle
        PADS[i % len(PADS)].set(object())  # allocates HAMT nodes: the collection point
        if safe_point is not None:
            safe_point()


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--safe-points"]
    main(int(args[0]) if args else 2_000_000, safe_points="--safe-points" in sys.argv[1:])
