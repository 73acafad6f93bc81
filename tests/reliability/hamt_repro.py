"""Reproduce CPython gh-148891: GC inside ``ContextVar.set`` runs a finalizer that sets a ContextVar.

Not a test (it crashes the interpreter it finds the bug in). Run:
``PYTHONMALLOC=debug python -X faulthandler -m tests.reliability.hamt_repro``
— on CPython 3.10/3.11 it segfaults in ``ContextVar.set`` within seconds (freed HAMT
nodes are poisoned by the debug allocator); on 3.12+ it prints ``survived``. The
finalizer here is a generator's ``finally``; in LiteLLM 1.108.7 it is
``CustomStreamWrapper.__del__`` (see docs/operations/known-issues.md).
"""

from __future__ import annotations

import contextlib
import contextvars
import gc
import sys
from collections.abc import Iterator

VAR = contextvars.ContextVar[int]("var")
PADS = [contextvars.ContextVar[object](f"pad{i}") for i in range(64)]  # a multi-level HAMT


def _holds_the_var() -> Iterator[None]:
    token = VAR.set(1)
    try:
        yield
    finally:  # runs when the garbage collector finalizes the abandoned generator
        with contextlib.suppress(ValueError):
            VAR.reset(token)


def main(iterations: int = 2_000_000) -> None:
    for pad in PADS:
        pad.set(object())
    gc.set_threshold(5)  # collect often, so some collections start inside ContextVar.set
    for i in range(iterations):
        gen = _holds_the_var()
        next(gen)
        cycle: list[object] = [gen]
        cycle.append(cycle)  # only the cyclic collector can free it
        del gen, cycle
        PADS[i % len(PADS)].set(object())  # allocates HAMT nodes: the collection point
    print("survived", iterations, "iterations on", sys.version.split()[0])


if __name__ == "__main__":
    main()
