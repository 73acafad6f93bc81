"""Attribute writes on a wrapper reach the wrapped object, as reads do (``__getattr__``).

A wrapper forwards reads it does not answer itself to the router or client it wraps; without
the matching writes, ``wrapped.api_key = "new"`` (key rotation), ``wrapped.fallbacks = [...]``
or ``wrap(litellm).drop_params = True`` would land on the wrapper: reads would show the new
value while the wrapped object, which makes the calls, kept the old one.
"""

from __future__ import annotations

from typing import Any


def _own(wrapper: object, own: frozenset[str], name: str) -> bool:
    """The wrapper keeps ``name`` itself: one of its instance attributes (``own``), or a name its
    class defines (methods, properties: patching one, as ``monkeypatch`` does, patches the
    wrapper, and a read-only property still refuses the write)."""
    return name in own or hasattr(type(wrapper), name)


def set_forwarded(wrapper: object, inner: str, own: frozenset[str], name: str, value: Any) -> None:
    """``wrapper.name = value``: on the wrapper for its own names, else on the wrapped object
    (``inner``: the wrapper's attribute holding it). A monitored view the wrapper put under
    that name (a client's ``chat``) gives way to the application's value."""
    if _own(wrapper, own, name):
        object.__setattr__(wrapper, name, value)
        return
    wrapper.__dict__.pop(name, None)
    setattr(object.__getattribute__(wrapper, inner), name, value)


def del_forwarded(wrapper: object, inner: str, own: frozenset[str], name: str) -> None:
    """``del wrapper.name``: the counterpart of :func:`set_forwarded`."""
    if _own(wrapper, own, name):
        object.__delattr__(wrapper, name)
        return
    wrapper.__dict__.pop(name, None)
    delattr(object.__getattribute__(wrapper, inner), name)
