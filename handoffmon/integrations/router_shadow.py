"""Shadow calls for a wrapped ``litellm.Router``: straight to one of its deployments, no fallbacks.

The runtime's ``ShadowRunner`` names canonical models; the Router knows model groups. A
model is asked through a deployment of the group whose deployments all serve it (a group
mixing models could hand the call to another one): ``litellm.completion`` with that
deployment's ``litellm_params`` (keys already resolved by the Router), without fallbacks or
retries — not through the Router, so a shadow call's failure or timeout never counts toward
the Router's ``allowed_fails`` nor puts a production deployment into cooldown, and its
latency and usage never enter the Router's routing statistics. The reply's author (the
deployment called, by the author rule) is still checked against the target. The call
bypasses the wrapper too, so it is never recorded as a turn.

A shadow call that fails is counted (``handoffmon_shadow_calls_total{outcome}``); LiteLLM's
own log of it is dropped, so handoffmon's background calls do not fill the application's
logs. The application's own calls log as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from handoffmon.attribution import ModelNames
from handoffmon.ingress import author, served_by_response
from handoffmon.integrations.router_routing import fallback_groups
from handoffmon.prices import cost_map_prices
from handoffmon.runtime.shadow_calls import shadow_reply
from handoffmon.shadow.turns import SHADOW_PARAMS, NoRoute, Params, ShadowReply

GROUPS_TTL_S = 60.0
"""How long the Router's model → group map is reused before re-reading its model list."""

SHADOW_METADATA = {"handoffmon_shadow": True}
"""Metadata of every shadow call: callbacks can tell it from served traffic."""

ROUTER_ONLY_PARAMS = frozenset({"silent_model", "include_fallback_errors"})
"""Deployment ``litellm_params`` the Router consumes itself and never passes to ``litellm.completion``."""

SHADOW_SETS = frozenset({
    "messages", "max_tokens", "max_completion_tokens", "timeout", "stream", "stream_timeout",
    "num_retries", "max_retries", "metadata", "no-log",
})  # fmt: skip
"""Deployment ``litellm_params`` a shadow call sets itself (``max_completion_tokens`` too: a
deployment's own output cap could exceed ``max_output_tokens``, the bound the budget reserves)."""

ROUTER_LOGGERS = ("LiteLLM Router", "LiteLLM")
"""LiteLLM's loggers (``verbose_router_logger``, ``verbose_logger``) that report a failed call."""

_log = logging.getLogger("handoffmon.shadow")

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
        targets: ``shadow.targets``; those naming no deployment's canonical model are logged once
            here, at wrap time (a target such as ``gpt-4o`` where the Router's authors are
            ``openai/gpt-4o`` would otherwise be skipped silently as ``not_allowed``).
    """

    def __init__(
        self,
        router: Any,
        names: ModelNames,
        *,
        clock: Callable[[], float] = time.monotonic,
        targets: Sequence[str] = (),
    ) -> None:
        self._router = router
        self._names = names
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: tuple[dict[str, str], dict[str, tuple[float, float] | None], float] | None = None
        _quiet_shadow_calls()
        if targets:
            self._warn_unmatched(targets)

    @property
    def router(self) -> Any:
        """The Router the shadow calls go through."""
        return self._router

    # -- ShadowSource ---------------------------------------------------------------------

    def call(
        self, target: str, messages: list[Any], *, max_tokens: int, timeout_s: float, params: Params = None
    ) -> ShadowReply:
        """Ask ``target`` through one deployment of its group, without fallbacks or retries (not
        through the Router: no cooldowns), with the served request's ``params``; raises ``NoRoute``
        when no group serves only it, else what ``litellm.completion`` raises."""
        import litellm

        group = self._groups()[0].get(target)
        deployment = self._deployment(group) if group is not None else None
        if deployment is None:
            raise NoRoute(f"no router group serves only {target!r}")
        quiet = _IN_SHADOW_CALL.set(True)
        try:
            response = litellm.completion(**call_params(deployment, messages, max_tokens, timeout_s, params))
        finally:
            _IN_SHADOW_CALL.reset(quiet)
        dep_id = _field(_field(deployment, "model_info") or {}, "id")
        # the deployment called, as the Router's response would name it (a direct call names none)
        served = served_by_response(response)._replace(deployment_id=str(dep_id) if dep_id else None)
        model = _field(_field(deployment, "litellm_params") or {}, "model")
        price = _prices(deployment, model) if isinstance(model, str) else None
        return shadow_reply(self._names, response, served, price)  # what this deployment charged

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
        """Per-token prices of ``model``'s deployments (their ``model_info``, else litellm's cost map):
        the dearest input and output price among them, ``None`` when any is unknown — the budget
        reserves at these before it knows which deployment a call goes to."""
        return self._groups()[1].get(model)

    # -- the Router's model list ----------------------------------------------------------

    def _deployment(self, group: str) -> Any:
        """A deployment of ``group`` to call: the first not cooling down in the Router, else the
        first (``None``: the group has none)."""
        get = getattr(self._router, "get_model_list", None)
        deployments = list((get(model_name=group) if callable(get) else None) or ())
        if len(deployments) > 1:
            try:
                ids = [str(_field(_field(d, "model_info") or {}, "id")) for d in deployments]
                cooling = self._router.cooldown_cache.get_active_cooldowns(
                    model_ids=ids, parent_otel_span=None
                )
                cold = {c[0] if isinstance(c, tuple) else c for c in cooling}
                return next(
                    (d for d, i in zip(deployments, ids, strict=True) if i not in cold), deployments[0]
                )
            except Exception:  # cooldowns unreadable: any deployment of the group serves the model
                pass
        return deployments[0] if deployments else None

    def _warn_unmatched(self, targets: Sequence[str]) -> None:
        """Log the targets no deployment's canonical model matches (never raises)."""
        try:
            known = self._groups()[1]
            missing = sorted(t for t in set(targets) if t not in known)
            if missing:
                _log.warning(
                    "handoffmon shadow.targets %s match no deployment of this Router: targets are "
                    "canonical model names as attribution names the authors (this Router's: %s); "
                    "no shadow call will go to them",
                    missing[:20],
                    sorted(known)[:20],
                )
        except Exception:
            _log.debug("handoffmon could not read the Router's models for shadow.targets", exc_info=True)

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
                price = _prices(dep, model)
                prices[canonical] = _dearer(prices[canonical], price) if canonical in prices else price
        by_model: dict[str, str] = {}
        for group, found in models.items():
            if len(found) == 1:
                by_model.setdefault(next(iter(found)), group)
        with self._lock:
            self._cache = (by_model, prices, now + GROUPS_TTL_S)
        return by_model, prices


def call_params(
    deployment: Any,
    messages: list[Any],
    max_tokens: int,
    timeout_s: float,
    request: Params = None,
) -> dict[str, Any]:
    """``litellm.completion``'s arguments for a shadow call to ``deployment``: its ``litellm_params``
    (less what only the Router reads, and the output caps ``SHADOW_SETS`` replaces), overridden by
    the served request's generation parameters (``request``: ``turns.SHADOW_PARAMS`` only) and the
    shadow call's own, as the Router lets a call's arguments override a deployment's. So a
    deployment configured with its own ``timeout``, ``max_tokens``, ``num_retries``, ``metadata``,
    ``max_retries`` or ``stream`` is still called once, bounded, not streamed, and tagged.

    ``no-log``: LiteLLM runs none of its logging callbacks for the call (an application's Langfuse,
    S3 or own ``CustomLogger`` would get the history and the target's reply; a LiteLLM Proxy's
    spend logs too), only its ``_PROXY_`` hooks; ``litellm.global_disable_no_log_param = True``
    logs them again."""
    own = dict(_field(deployment, "litellm_params") or {})
    params = {k: v for k, v in own.items() if k not in ROUTER_ONLY_PARAMS and k not in SHADOW_SETS}
    metadata = own.get("metadata")
    return {
        **params,
        **{k: v for k, v in (request or {}).items() if k in SHADOW_PARAMS},
        "messages": messages,
        "max_tokens": max_tokens,
        "timeout": timeout_s,
        "stream": False,
        "num_retries": 0,
        "max_retries": 0,
        "metadata": {**(metadata if isinstance(metadata, Mapping) else {}), **SHADOW_METADATA},
        "no-log": True,  # LiteLLM's logging callbacks never get the history or the reply
    }


def _field(d: Any, name: str) -> Any:
    return d.get(name) if isinstance(d, Mapping) else getattr(d, name, None)


def _dearer(a: tuple[float, float] | None, b: tuple[float, float] | None) -> tuple[float, float] | None:
    """The higher input and output price of two deployments of one model (``None``: one unknown)."""
    return None if a is None or b is None else (max(a[0], b[0]), max(a[1], b[1]))


def _prices(deployment: Any, model: str) -> tuple[float, float] | None:
    """(input, output) USD per token: the deployment's own ``model_info``, else litellm's cost map."""
    info = _field(deployment, "model_info") or {}
    inp, out = _field(info, "input_cost_per_token"), _field(info, "output_cost_per_token")
    if not isinstance(inp, (int, float)) or not isinstance(out, (int, float)):
        return cost_map_prices(model)
    return float(inp), float(out)
