"""Fork safety: a forked child gets working monitoring, not the parent's dead threads.

``os.fork()`` copies the process with only the forking thread: an application that wraps at
import and then forks (``gunicorn --preload``, ``multiprocessing`` with the ``fork`` start
method) would otherwise keep queuing turns for pipeline threads that do not exist in the
child — ``flush()`` times out and the queues fill up and stay full — and a lock one of the
parent's threads held at the fork stays held forever.

Every monitor, runtime and module that owns threads registers here; in the child,
``os.register_at_fork(after_in_child=...)`` renews their locks (``renew_locks``), then runs
each one's ``_after_fork``, which forgets the parent's queued work (the parent handles it; the
child would count it twice) and starts its threads again. Said once per child in the log.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol

_log = logging.getLogger("handoffmon.pipeline")


class _Forkable(Protocol):
    def _after_fork(self) -> int: ...


_objects: weakref.WeakSet[Any] = weakref.WeakSet()
_hooks: list[Callable[[], int]] = []

_LOCKS = (type(threading.Lock()), type(threading.RLock()), threading.Condition, threading.Event)
_ATOMS = (str, bytes, int, float, bool, type(None), complex)
_DESCEND = ("handoffmon", "prometheus_client")
"""Packages whose objects ``renew_locks`` looks into (with the containers they hold)."""

MAX_RENEW_OBJECTS = 2_000_000
"""Bound on the objects one ``renew_locks`` walk visits."""


def track(obj: _Forkable) -> None:
    """Call ``obj._after_fork()`` in every child forked while ``obj`` lives (held weakly)."""
    _objects.add(obj)


def on_fork(hook: Callable[[], int]) -> None:
    """Call ``hook()`` in every forked child (a module's own state; held for the process); it
    returns how many queued items of the parent's it forgot."""
    _hooks.append(hook)


def renew_in_child(*locks: object) -> None:
    """Renew these module-level locks in every forked child (``renew_locks``)."""

    def renew() -> int:
        renew_locks(locks)
        return 0  # no queued items forgotten

    on_fork(renew)


def renew_locks(root: object) -> int:
    """Re-initialize every lock, condition and event reachable from ``root`` through handoffmon's
    (and prometheus_client's) objects and the containers they hold, in place (the stdlib's
    ``_at_fork_reinit``, as ``logging`` and ``threading`` do): in a forked child no other thread
    exists, so a lock one of the parent's threads held is free again. How many were renewed."""
    seen: set[int] = set()
    stack: list[Any] = [root]
    n = 0
    while stack and len(seen) < MAX_RENEW_OBJECTS:
        obj = stack.pop()
        if isinstance(obj, _ATOMS) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, _LOCKS):
            reinit = getattr(obj, "_at_fork_reinit", None)
            if callable(reinit):
                reinit()
                n += 1
            continue
        if isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif type(obj).__module__.split(".", 1)[0] in _DESCEND:
            attrs = getattr(obj, "__dict__", None)
            if isinstance(attrs, dict):
                stack.extend(attrs.values())
            for slot in getattr(type(obj), "__slots__", ()):
                value = getattr(obj, slot, None)
                if value is not None:
                    stack.append(value)
    return n


def _after_fork_in_child() -> None:
    """In a forked child: every registered object's locks are renewed, then (all of them first:
    a restarted thread may take any of them) each hook runs and each object restarts its
    threads. Never raises."""
    dropped = 0
    restarted = 0
    objects = list(_objects)
    try:
        renew_locks(objects)
    except Exception:  # pragma: no cover - the walk reads attributes only
        _log.warning("handoffmon could not renew its locks after a fork", exc_info=True)
    for hook in list(_hooks):
        try:
            dropped += hook()
        except Exception:  # pragma: no cover - a hook failing must not fail the fork
            _log.warning("handoffmon could not reset after a fork", exc_info=True)
    for obj in objects:
        try:
            dropped += obj._after_fork()
            restarted += 1
        except Exception:
            _log.warning("handoffmon could not restart %s after a fork", type(obj).__name__, exc_info=True)
    if restarted:
        _log.info(
            "handoffmon: restarted monitoring in forked process %d (%d queued items left to the parent)",
            os.getpid(),
            dropped,
        )


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)
