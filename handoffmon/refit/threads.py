"""``single_threaded_blas()``: run refit linear algebra on one BLAS thread."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

_CONTROLLER: list[Any] = []  # the cached threadpoolctl controller (one entry once built)


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Limit BLAS to one thread for the duration (restored afterwards).

    The refit's matrices are small (≤ 2·K parameters, K·(K−1) rows), where
    multi-threaded BLAS only adds synchronization, and a background refit must not take
    every core from the process serving traffic. Measured on a loaded 2-core host:
    K = 50 went from 2.6 s p50 / 5.2 s p99 to 1.2 s / 1.4 s; a 200-replicate test loop
    of GLS fits from 47 s to 1 s. Without threadpoolctl installed this is a no-op.

    The controller (threadpoolctl's scan of the loaded libraries, ~20 ms: a realpath per
    shared object) is built once, after numpy's and scipy's BLAS are loaded, and reused.
    """
    controller = _controller()
    if controller is None:  # optional at run time; only speed differs
        yield
        return
    with controller.limit(limits=1, user_api="blas"):
        yield


def _controller() -> Any:
    if not _CONTROLLER:
        try:
            import scipy.linalg  # noqa: F401  (loads scipy's BLAS, so the scan finds it)
            from threadpoolctl import ThreadpoolController
        except ImportError:
            return None
        _CONTROLLER.append(ThreadpoolController())
    return _CONTROLLER[0]
