"""Shadow calls through a wrapped ``litellm.Router``: same Router, fallbacks and retries off.

The runtime's ``ShadowRunner`` names canonical models; the Router knows model groups. A
model is asked through the group whose deployments all serve it (a group mixing models
could hand the call to another one), with ``fallbacks`` (and the context-window and
content-policy fallbacks) emptied for the call, so the shadow reply is authored by the
model asked — which the reply's ``_hidden_params`` confirm. The call goes to the Router
itself, not through the wrapper, so it is never recorded as a turn.

A shadow call that fails is counted (``handoffmon_shadow_calls_total{outcome="error"}``); the
Router's own log of it (an ERROR with its fallback debug text, since the call has no
fallbacks) is dropped, so handoffmon's background calls do not fill the application's logs.
The application's own calls log as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from handoffmon.attribution import ModelNames
from handoffmon.ingress import author
from handoffmon.integrations.router_routing import fallback_groups
from handoffmon.prices import cost_map_prices
from handoffmon.runtime.shadow_calls import shadow_reply
from handoffmon.shadow.turns import NoRoute, ShadowReply

GROUPS_TTL_S = 60.0
"""How long the Router's model → group map is reused before re-reading its model list."""

SHADOW_METADATA = {"handoffmon_shadow": True}
"""Metadata of every shadow call: callbacks can tell it from served traffic."""

ROUTER_LOGGERS = ("LiteLLM Router", "LiteLLM")
"""LiteLLM's loggers (``verbose_router_logger``, ``verbose_logger``) that report a failed call."""

_IN_SHADOW_CALL: ContextVar[bool] = ContextVar("handoffmon_shadow_call", default=False)


class _ShadowCallLogs(logging.Filter):
    """Drops LiteLLM's records made while a shadow call runs (this thread, or tasks it started)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _IN_SHADOW_CALL.get()


_FILTER = _ShadowCallLogs()
_installed = False
_install_lock = threading.Lock()


def _quiet_shadow_calls() -> None:
    """Attach the filter to LiteLLM's loggers once per process."""
    global _installed
    with _install_lock:
        if not _installed:
            for name in ROUTER_LOGGERS:
                logging.getLogger(name).addFilter(_FILTER)
            _installed = True


class RouterShadow:
    """A ``ShadowSource`` over one ``litellm.Router``.

    Args:
        router: the Router the application's turns went through.
        names: canonical model names (the monitor's).
        clock: monotonic clock for the cache.
    """

    def __init__(
        self, router: Any, names: ModelNames, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._router = router
        self._names = names
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: tuple[dict[str, str], dict[str, tuple[float, float] | None], float] | None = None
        _quiet_shadow_calls()

    @property
    def router(self) -> Any:
        """The Router the shadow calls go through."""
        return self._router

    # -- ShadowSource ---------------------------------------------------------------------

    def call(self, target: str, messages: list[Any], *, max_tokens: int, timeout_s: float) -> ShadowReply:
        """Ask ``target`` through its group, without fallbacks or retries; raises what the Router raises."""
        group = self._groups()[0].get(target)
        if group is None:
            raise NoRoute(f"no router group serves only {target!r}")
        quiet = _IN_SHADOW_CALL.set(True)
        try:
            response = self._router.completion(
                model=group,
                messages=messages,
                max_tokens=max_tokens,
                timeout=timeout_s,
                num_retries=0,
                fallbacks=[],
                context_window_fallbacks=[],
                content_policy_fallbacks=[],
                metadata=dict(SHADOW_METADATA),
            )
        finally:
            _IN_SHADOW_CALL.reset(quiet)
        return shadow_reply(self._names, response, None, self.prices(target))

    def routable(self, target: str) -> bool:
        """Whether some group serves only ``target`` (else no call could go to it)."""
        return target in self._groups()[0]

    def candidates(self, model: str) -> Sequence[str]:
        """Models of the Router's fallback groups for ``model``'s group (single-model groups only)."""
        by_model, _ = self._groups()
        group = by_model.get(model)
        if group is None:
            return ()
        by_group = {g: m for m, g in by_model.items()}
        found = (by_group.get(g) for g in fallback_groups(getattr(self._router, "fallbacks", None), group))
        return tuple(m for m in found if m is not None and m != model)

    def prices(self, model: str) -> tuple[float, float] | None:
        """Per-token prices of ``model``'s deployment (its ``model_info``, else litellm's cost map)."""
        return self._groups()[1].get(model)

    # -- the Router's model list ----------------------------------------------------------

    def _groups(self) -> tuple[dict[str, str], dict[str, tuple[float, float] | None]]:
        """(canonical model → the first group serving only it, model → prices), cached."""
        now = self._clock()
        with self._lock:
            if self._cache is not None and self._cache[2] > now:
                return self._cache[0], self._cache[1]
        models: dict[str, set[str]] = {}
        prices: dict[str, tuple[float, float] | None] = {}
        for dep in getattr(self._router, "model_list", None) or ():
            group, model = _field(dep, "model_name"), _field(_field(dep, "litellm_params") or {}, "model")
            dep_id = _field(_field(dep, "model_info") or {}, "id")
            if isinstance(group, str) and isinstance(model, str):
                # the served turns' author rule, so the names agree with attribution's
                canonical = self._names.canonical(
                    author(self._names, dep_id if isinstance(dep_id, str) else None, model)
                )
                models.setdefault(group, set()).add(canonical)
                prices.setdefault(canonical, _prices(dep, model))
        by_model: dict[str, str] = {}
        for group, found in models.items():
            if len(found) == 1:
                by_model.setdefault(next(iter(found)), group)
        with self._lock:
            self._cache = (by_model, prices, now + GROUPS_TTL_S)
        return by_model, prices


def _field(d: Any, name: str) -> Any:
    return d.get(name) if isinstance(d, Mapping) else getattr(d, name, None)


def _prices(deployment: Any, model: str) -> tuple[float, float] | None:
    """(input, output) USD per token: the deployment's own ``model_info``, else litellm's cost map."""
    info = _field(deployment, "model_info") or {}
    inp, out = _field(info, "input_cost_per_token"), _field(info, "output_cost_per_token")
    if not isinstance(inp, (int, float)) or not isinstance(out, (int, float)):
        return cost_map_prices(model)
    return float(inp), float(out)
