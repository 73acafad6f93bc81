"""``wrap(litellm)``: the module's batch helpers, their ``litellm.completion`` calls monitored.

``litellm.batch_completion``, ``batch_completion_models`` and
``batch_completion_models_all_responses`` call ``litellm.completion`` themselves, through the
name ``litellm`` in their module's globals. The wrapper hands out a copy of each helper whose
globals name a view of the module with ``completion`` the wrapper's: the same code, defaults and
threads, its calls recorded as turns, and nothing global changed (the module, and an unwrapped
call of the helper, stay litellm's own).

The copy's globals read every other name live from the helper's own module (:class:`_Globals`),
so a copy made once stays the helper as litellm has it now: the wrapper keeps it
(``RouterWrapper``) and makes a new one only when ``litellm.<helper>`` itself is replaced.
"""

from __future__ import annotations

import builtins
import functools
import types
from collections.abc import Callable
from typing import Any

BATCH_HELPERS = frozenset(
    {"batch_completion", "batch_completion_models", "batch_completion_models_all_responses"}
)
"""The litellm module's helpers that call ``litellm.completion`` themselves."""


class _Module:
    """The litellm module as a helper's globals see it: ``completion`` the wrapper's, every
    other attribute the module's."""

    def __init__(self, module: Any, completion: Callable[..., Any]) -> None:
        self._module = module
        self.completion = completion

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


class _Globals(dict[str, Any]):
    """A helper copy's globals: ``litellm`` the wrapper's view and ``__builtins__`` its own, every
    other name read from the helper module's globals when the code asks (``__missing__``: a
    global read of a ``dict`` subclass goes through it), so a name that module rebinds later
    (a monkeypatch) is the one the copy sees, as the helper itself does."""

    __slots__ = ("_live",)

    def __init__(self, live: dict[str, Any], module: _Module) -> None:
        super().__init__(__builtins__=live.get("__builtins__", builtins), litellm=module)
        self._live = live

    def __missing__(self, name: str) -> Any:
        return self._live[name]


def calling_through(helper: Any, completion: Callable[..., Any]) -> Any:
    """A copy of litellm's batch ``helper`` whose ``litellm.completion`` is ``completion``; the
    helper itself when it is not a plain function reading ``litellm`` from its globals (a
    LiteLLM release that made its calls some other way: they reach litellm unmonitored)."""
    if not isinstance(helper, types.FunctionType):
        return helper
    live = helper.__globals__
    module = live.get("litellm")
    if not isinstance(module, types.ModuleType):
        return helper
    scope = _Globals(live, _Module(module, completion))  # the helper's comprehensions read it too
    code, name = helper.__code__, helper.__name__
    copy = types.FunctionType(code, scope, name, helper.__defaults__, helper.__closure__)
    copy.__kwdefaults__ = helper.__kwdefaults__
    return functools.update_wrapper(copy, helper)
