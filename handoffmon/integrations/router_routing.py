"""Risk-aware fallback order for a wrapped ``litellm.Router``: per-request ``fallbacks``.

litellm reads ``kwargs.get("fallbacks", router.fallbacks)`` per call (and again on each
nested fallback hop), so a per-request list *replaces* the router's configured one. The
adapter therefore passes the router's whole list (or the caller's own per-call list) with
only the requested group's entry reordered and placed first (litellm takes the first
exact match), so every other group's fallbacks — and nested hops — behave as configured.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from handoffmon.attribution.names import ModelNames
from handoffmon.ingress.request import ResponseLink
from handoffmon.ingress.served import author
from handoffmon.routing import Candidate, RoutingState
from handoffmon.routing.fallbacks import is_plain, reordered
from handoffmon.routing.policy import MAX_ORDERED
from handoffmon.routing.prefix import PrefixLookup

_log = logging.getLogger("handoffmon.routing")

FACTS_TTL_S = 60.0
"""How long a group's candidates (models, prices, latency) are reused before re-reading the router."""

MAX_CACHED = 1024
"""Bound of the per-group caches (facts, and fallback lookups by the list's contents)."""

MAX_CACHED_NAME = 256
"""Longest group name, and most entries of a fallback list, kept in those caches: a list a
request carries (a LiteLLM Proxy body) is the client's to make, so what the caches hold stays
bounded in bytes, not only in entries (a longer list or name is looked up, not kept)."""


class RouterRouting:
    """Reorders a ``litellm.Router`` request's fallbacks by the runtime's routing policy.

    ``apply`` is called on the request path before the router call, only when routing is
    enabled. It never raises: any failure counts ``outcome="error"`` and leaves the call
    unchanged.

    Args:
        router: the ``litellm.Router``.
        state: the runtime's routing state (settings, policy, table, counters).
        lookup: request-time prefix lookup over the monitor's attributor.
        names: the monitor's ``ModelNames``: candidates are named by ``ingress.author``'s rule
            (as the table's pairs and ``RouterShadow`` name them), then canonicalised.
        clock: wall clock (table staleness, cache expiry).
    """

    def __init__(
        self,
        router: Any,
        state: RoutingState,
        lookup: PrefixLookup,
        names: ModelNames,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.router = router
        """The router whose fallbacks and deployments are read."""
        self._state = state
        self._lookup = lookup
        self._names = names
        self._clock = clock
        self._mode = state.settings.mode
        self._need_cost = state.settings.max_extra_cost_usd_per_mtok is not None
        self._need_latency = state.settings.max_extra_latency_s is not None
        self._groups: dict[str, tuple[Candidate, float]] = {}
        self._lists: dict[tuple[str, Any], tuple[str, ...]] = {}

    def apply(
        self, model: Any, messages: Any, kwargs: dict[str, Any], link: ResponseLink | None = None
    ) -> dict[str, Any] | None:
        """The call's kwargs with ``fallbacks`` reordered, or ``None`` to call unchanged.
        ``link``: a Responses API call's link to a history the provider keeps."""
        state = self._state
        try:
            source = kwargs.get("fallbacks", self.router.fallbacks)
            now = self._clock()
            cands = self._candidates_for(model, source, now) if type(model) is str else ()
            decision = state.route(cands, messages, self._lookup, now=now, healthy=self._healthy, link=link)
            if not decision.changed or not state.enforcing:
                return None
            return {**kwargs, "fallbacks": self._rewrite(source, model, decision.groups)}
        except Exception:
            _log.warning("handoffmon routing failed; the router's own fallback order is used", exc_info=True)
            state.counts.count(self._mode, "error")
            return None

    def apply_body(
        self, body: dict[str, Any], messages: Any = None, link: ResponseLink | None = None
    ) -> bool:
        """A LiteLLM Proxy request body: reorder its ``fallbacks`` in place; True when changed.
        ``messages``: the history read as chat (default: the body's ``messages``); ``link``: a
        Responses API call's link to a history the provider keeps.

        The source list is the body's own ``fallbacks``, else the key's or team's
        ``router_settings`` fallbacks the proxy would apply (``router_settings_override``),
        else the router's. Never raises (as ``apply``).
        """
        kwargs: dict[str, Any] = body
        if "fallbacks" not in body:
            override = body.get("router_settings_override")
            if isinstance(override, Mapping) and override.get("fallbacks") is not None:
                kwargs = {"fallbacks": override["fallbacks"]}
        out = self.apply(
            body.get("model"), body.get("messages") if messages is None else messages, kwargs, link
        )
        if out is None:
            return False
        body["fallbacks"] = out["fallbacks"]
        return True

    # -- candidates -------------------------------------------------------------------

    def _candidates_for(self, group: str, source: Any, now: float) -> tuple[Candidate, ...]:
        """The fallback groups ``source`` names for ``group`` now, as candidates.

        The list is read on every request, so a change to ``router.fallbacks`` —
        replaced or edited in place — applies to the next request; only each group's facts
        (model, price, latency) are reused for ``FACTS_TTL_S``.
        """
        groups = self._fallback_groups(source, group)
        return tuple(  # the policy orders the first MAX_ORDERED; the others need no facts
            self._candidate(g, now) if i < MAX_ORDERED else Candidate(g, None) for i, g in enumerate(groups)
        )

    def _fallback_groups(self, source: Any, group: str) -> tuple[str, ...]:
        """``fallback_groups``, cached by the list's contents: an edited list is a new key. (Measured
        on a 40-entry list: litellm's lookup ~280 µs, the key — a frozen copy of the list — ~18 µs.)"""
        if is_plain(source):
            return tuple(source)
        try:
            key = (group, _frozen(source))
            hit = self._lists.get(key)
        except TypeError:  # an unhashable value (a parameter dict's): not cached
            return fallback_groups(source, group)
        if hit is None:
            hit = fallback_groups(source, group)
            if len(self._lists) >= MAX_CACHED:
                self._lists.clear()
            self._lists[key] = hit
        return hit

    def _candidate(self, group: str, now: float) -> Candidate:
        hit = self._groups.get(group)
        if hit is not None and hit[1] > now:
            return hit[0]
        deployments = self._deployments(group)
        names = self._names
        authors = (author(names, _id_of(d), _model_of(d)) for d in deployments)
        models = {names.canonical(m) for m in authors if m}
        cand = Candidate(
            group,
            next(iter(models)) if len(models) == 1 else None,
            _cost_usd_per_mtok(deployments) if self._need_cost else None,
            self._latency_s(group) if self._need_latency else None,
        )
        if len(group) <= MAX_CACHED_NAME:  # a request's own list may name anything: not kept
            if len(self._groups) >= MAX_CACHED:
                self._groups.clear()
            self._groups[group] = (cand, now + FACTS_TTL_S)
        return cand

    def _deployments(self, group: str) -> list[Any]:
        get = getattr(self.router, "get_model_list", None)
        found = get(model_name=group) if callable(get) else None
        return list(found or ())

    def _latency_s(self, group: str) -> float | None:
        """Mean of the router's latency statistics for the group's deployments (latency-based
        routing keeps them in ``router.cache`` under ``<group>_map``); ``None`` when it has none."""
        cache = getattr(self.router, "cache", None)
        stats = cache.get_cache(key=f"{group}_map") if cache is not None else None
        if not isinstance(stats, Mapping):
            return None
        values = [
            float(x)
            for entry in stats.values()
            if isinstance(entry, Mapping)
            for x in (entry.get("latency") or ())
            if isinstance(x, (int, float))
        ]
        return sum(values) / len(values) if values else None

    def _healthy(self, group: str) -> bool:
        """Whether some deployment of ``group`` is not cooling down (False when unreadable)."""
        try:
            ids = [i for i in (_id_of(d) for d in self._deployments(group)) if i]
            if not ids:
                return False
            cooldowns = self.router.cooldown_cache.get_active_cooldowns(model_ids=ids, parent_otel_span=None)
            return len(cooldowns) < len(ids)
        except Exception:
            return False

    # -- the rewritten list -----------------------------------------------------------

    def _rewrite(self, source: Any, group: str, order: list[str]) -> list[Any]:
        """``source`` with the group's candidates in ``order`` (``routing.fallbacks.reordered``),
        built from the list as it is now: every other entry is the router's own, so a hop the
        current configuration has is never dropped."""
        return reordered(source, group, order)


def fallback_groups(fallbacks: Any, group: str) -> tuple[str, ...]:
    """The fallback groups litellm would try for ``group`` under ``fallbacks``: a plain list of
    group names itself (client-side fallbacks, tried in order), else litellm's own lookup
    (exact, stripped and provider-prefixed names, then ``*``); ``()`` for none or another
    non-standard format (parameter dicts), which the policy leaves alone."""
    from litellm.router_utils.fallback_event_handlers import (
        check_non_standard_fallback_format,
        get_fallback_model_group,
    )

    if is_plain(fallbacks):
        return tuple(fallbacks)
    if not fallbacks or not isinstance(fallbacks, Sequence) or check_non_standard_fallback_format(fallbacks):
        return ()
    found, generic = get_fallback_model_group(fallbacks=fallbacks, model_group=group)
    if found is None and generic is not None:
        found = fallbacks[generic]["*"]
    return tuple(g for g in found or () if isinstance(g, str))


def _frozen(fallbacks: Any) -> Any:
    """A hashable copy of a fallback list's contents (raises TypeError for unhashable values, and
    for a list too large to keep: more than ``MAX_CACHED_NAME`` entries, or groups in an entry,
    or characters in a name)."""
    if type(fallbacks) is not list:
        return fallbacks
    if len(fallbacks) > MAX_CACHED_NAME:
        raise TypeError("too large to cache")
    out: list[Any] = []
    for e in fallbacks:
        if type(e) is dict:
            entry = []
            for k, v in e.items():
                if type(v) is list:
                    if len(v) > MAX_CACHED_NAME or any(_long(g) for g in v):
                        raise TypeError("too large to cache")
                    v = tuple(v)
                if _long(k):
                    raise TypeError("too large to cache")
                entry.append((k, v))
            e = tuple(entry)
        elif _long(e):
            raise TypeError("too large to cache")
        out.append(e)
    return tuple(out)


def _long(name: Any) -> bool:
    return isinstance(name, str) and len(name) > MAX_CACHED_NAME


def _field(d: Any, name: str) -> Any:
    return d.get(name) if isinstance(d, Mapping) else getattr(d, name, None)


def _model_of(deployment: Any) -> str | None:
    model = _field(_field(deployment, "litellm_params") or {}, "model")
    return model if isinstance(model, str) else None


def _id_of(deployment: Any) -> str | None:
    mid = _field(_field(deployment, "model_info") or {}, "id")
    return str(mid) if mid is not None else None


def _cost_usd_per_mtok(deployments: Sequence[Any]) -> float | None:
    """Highest input + output price per million tokens among the deployments: the deployment's own
    ``model_info`` prices, else litellm's cost map; ``None`` when any is unknown."""
    import litellm

    prices: list[float] = []
    for d in deployments:
        info = _field(d, "model_info") or {}
        inp, out = _field(info, "input_cost_per_token"), _field(info, "output_cost_per_token")
        if not isinstance(inp, (int, float)) or not isinstance(out, (int, float)):
            entry = litellm.model_cost.get(_model_of(d) or "") or {}
            inp, out = entry.get("input_cost_per_token"), entry.get("output_cost_per_token")
        if not isinstance(inp, (int, float)) or not isinstance(out, (int, float)):
            return None
        prices.append((float(inp) + float(out)) * 1e6)
    return max(prices) if prices else None
