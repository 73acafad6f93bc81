"""Drain live runtimes when the process gets SIGTERM and nothing else handles it.

Python's default SIGTERM disposition kills the process without running ``atexit``, so
queued turns would be lost. When the process has no SIGTERM handler of its own (a plain
script or worker; servers such as uvicorn or gunicorn install theirs, shut down cleanly
and exit through ``atexit``), handoffmon installs one that closes every live runtime and
then terminates the process with the default disposition, as if it had not been there.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import weakref
from typing import Any, Protocol

from handoffmon.pipeline import fork

_log = logging.getLogger("handoffmon.runtime")


class Closeable(Protocol):
    """What the handler drains (a ``Runtime``)."""

    def close(self, timeout_s: float | None = None) -> None:
        """Drain and release."""
        ...


_live: weakref.WeakSet[Any] = weakref.WeakSet()
_lock = threading.Lock()
_installed = False
fork.renew_in_child(_lock)


def _on_sigterm(signum: int, frame: object) -> None:
    for rt in list(_live):
        try:
            rt.close()
        except Exception:  # fail-open even while dying
            _log.warning("handoffmon could not drain on SIGTERM", exc_info=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def drain_on_sigterm(runtime: Closeable) -> bool:
    """Close ``runtime`` on SIGTERM if no one else handles the signal; True if the hook is active.

    Only from the main thread (``signal.signal`` refuses elsewhere) and only while the
    SIGTERM disposition is the default one or handoffmon's own.
    """
    global _installed
    with _lock:
        _live.add(runtime)
        if _installed:
            return signal.getsignal(signal.SIGTERM) is _on_sigterm
        if threading.current_thread() is not threading.main_thread():
            return False
        if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
            return False
        signal.signal(signal.SIGTERM, _on_sigterm)
        _installed = True
        return True


def forget(runtime: Closeable) -> None:
    """Stop draining ``runtime`` (it was closed)."""
    with _lock:
        _live.discard(runtime)
