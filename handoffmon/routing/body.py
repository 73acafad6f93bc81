"""Risk-aware order in a forwarded request body: ``handoffmon serve`` rewrites its ``fallbacks``
(a chat completion's, or a Responses API call's, its history read as chat).

``serve`` sits in front of a LiteLLM Proxy and sees no router, so only what the request
itself carries can be reordered: a body without ``fallbacks`` is forwarded byte for byte
(and not even parsed here). See ``docs/guides/routing.md``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from handoffmon.ingress.apis import Api
from handoffmon.ingress.request import ResponseLink
from handoffmon.routing.fallbacks import entry_groups, reordered
from handoffmon.routing.policy import MAX_ORDERED, Candidate
from handoffmon.routing.prefix import PrefixLookup
from handoffmon.routing.state import RoutingState

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.pipeline.monitor import Monitor

_log = logging.getLogger("handoffmon.routing")

MAX_CANDIDATES_CACHED = 1024
"""Bound of the group → candidate cache."""

MAX_CACHED_NAME = 256
"""Longest group name kept in that cache (so it is bounded in bytes too)."""


class BodyRouting:
    """Reorders the ``fallbacks`` of a chat completion body by the runtime's routing policy.

    Each fallback group's model is its canonical name (``attribution.canonical_models``;
    a group name the refit never saw is never moved). Prices, latencies and health are
    unknown here: with a cost or latency cap set nothing moves, and ``return_home``
    treats the original model as healthy (the upstream router skips it if it is not).

    Args:
        state: the runtime's routing state.
        lookup: request-time prefix lookup over the monitor's attributor.
        canonical: group name → canonical model name (``ModelNames.canonical``).
        clock: wall clock (table staleness).
    """

    __slots__ = ("_api", "_cands", "_canonical", "_clock", "_lookup", "_state")

    def __init__(
        self,
        state: RoutingState,
        lookup: PrefixLookup,
        canonical: Callable[[str], str],
        *,
        clock: Callable[[], float] = time.time,
        api: Api | None = None,
    ) -> None:
        self._state = state
        self._lookup = lookup
        self._canonical = canonical
        self._clock = clock
        self._api = api
        self._cands: dict[str, Candidate] = {}

    def rewrite(self, body: bytes) -> bytes | None:
        """``body`` with its fallbacks reordered, or ``None`` to forward it unchanged. Never raises;
        a failure counts ``outcome="error"``."""
        if b'"fallbacks"' not in body:  # the common case costs one substring search
            return None
        state = self._state
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):  # not JSON: the forwarder counts it (bad_json)
            return None
        try:
            if not isinstance(doc, dict):
                return None
            model, fallbacks = doc.get("model"), doc.get("fallbacks")
            if type(model) is not str or fallbacks is None:
                return None
            messages, link = self._history(doc)
            if not isinstance(messages, list):
                return None
            cands = tuple(  # the policy orders the first MAX_ORDERED; the others need no model
                self._candidate(g) if i < MAX_ORDERED else Candidate(g, None)
                for i, g in enumerate(entry_groups(fallbacks, model))
            )
            decision = state.route(cands, messages, self._lookup, now=self._clock(), link=link)
            if not decision.changed or not state.enforcing:
                return None
            doc["fallbacks"] = reordered(fallbacks, model, decision.groups)
            return json.dumps(doc, separators=(",", ":")).encode()  # ASCII escapes: ~30% faster
        except Exception:
            _log.warning(
                "handoffmon routing failed; the request's fallbacks are forwarded as sent", exc_info=True
            )
            state.counts.count(state.settings.mode, "error")
            return None

    def _history(self, doc: dict[str, Any]) -> tuple[Any, ResponseLink | None]:
        """The body's history as chat messages, and its link to a history the provider keeps
        (another API's body is read by its reader, ``ingress.apis``)."""
        if self._api is None:
            return doc.get("messages"), None
        chat, _skip, link = self._api.read_request(doc)
        return (None if chat is None else chat.get("messages")), link

    def _candidate(self, group: str) -> Candidate:
        hit = self._cands.get(group)
        if hit is None:
            hit = Candidate(group, self._canonical(group))
            if len(group) <= MAX_CACHED_NAME:  # the body's names are the client's: long ones not kept
                if len(self._cands) >= MAX_CANDIDATES_CACHED:
                    self._cands.clear()
                self._cands[group] = hit
        return hit


def body_routing(state: RoutingState | None, monitor: Monitor, api: Api | None = None) -> BodyRouting | None:
    """The body rewriter for a runtime's routing state (``None`` when routing is disabled);
    ``api``: the API the bodies are calls of (``None``: chat completions)."""
    if state is None:
        return None
    return BodyRouting(state, PrefixLookup(monitor.attributor), monitor.names.canonical, api=api)
