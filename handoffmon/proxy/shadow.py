"""Shadow calls through ``serve``'s upstream: the same pooled client, on the serving loop, model names mapped.

A finished turn's offer carries an ``UpstreamShadow`` holding the request's credentials
(``authorization`` and the other API-key headers, nothing else), so the shadow call is
authorised as the application's request was. The runtime's shadow thread starts the call
as a task on the serving event loop (``call_on_loop``), where the upstream's connection
pool lives; no client request ever awaits it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from handoffmon.attribution import ModelNames
from handoffmon.ingress import served_by_headers
from handoffmon.prices import cost_map_prices
from handoffmon.proxy.forward import _decoded
from handoffmon.proxy.upstream import Upstream, response_headers
from handoffmon.runtime.shadow_calls import SHADOW_HEADER, call_on_loop, shadow_reply
from handoffmon.shadow.turns import SHADOW_PARAMS, NoRoute, Params, ShadowReply, ShadowSource

CREDENTIAL_HEADERS = frozenset(
    {"authorization", "api-key", "x-api-key", "openai-organization", "openai-project"}
)
"""Request headers a shadow call carries over from the served request (steering headers stay behind)."""

CHAT_PATH = "/v1/chat/completions"


class UpstreamStatusError(Exception):
    """The upstream answered a shadow call with an error status (429/5xx trip the breaker)."""

    def __init__(self, status_code: int) -> None:
        super().__init__(f"upstream answered {status_code}")
        self.status_code = status_code


class UpstreamFull(NoRoute):
    """Every upstream slot (``proxy.max_upstream_requests``) was taken or waited for: the shadow
    call was not sent, so it takes no slot from a client's request (skipped as ``busy``, its
    reservation given back: the target is routable, serve was busy)."""

    reason = "busy"


class UpstreamShadow:
    """A ``ShadowSource`` over ``serve``'s upstream, for one served request.

    Args:
        upstream: the proxy's pooled upstream client.
        names: canonical model names (the monitor's).
        loop: the serving event loop (the pool's).
        headers: the served request's credential headers.
        request_models: target → the ``model`` the upstream knows it by (``shadow.request_models``).
        reply_cap: largest reply read (``proxy.max_monitored_reply_bytes``).
    """

    def __init__(
        self,
        upstream: Upstream,
        names: ModelNames,
        loop: asyncio.AbstractEventLoop,
        headers: Sequence[tuple[str, str]],
        request_models: Mapping[str, str],
        reply_cap: int,
    ) -> None:
        self._upstream, self._names, self._loop = upstream, names, loop
        self._headers = list(headers)
        self._request_models = request_models
        self._cap = reply_cap

    def __repr__(self) -> str:  # no credentials in reprs
        return "UpstreamShadow()"

    def call(
        self, target: str, messages: list[Any], *, max_tokens: int, timeout_s: float, params: Params = None
    ) -> ShadowReply:
        """Ask ``target`` through the upstream (not streamed), with the served request's ``params``;
        raises on error statuses, transport errors."""
        return call_on_loop(self._loop, lambda: self._post(target, messages, max_tokens, params), timeout_s)

    async def _post(
        self, target: str, messages: list[Any], max_tokens: int, params: Params = None
    ) -> ShadowReply:
        import aiohttp

        model = self._request_models.get(target, target)
        own = {k: v for k, v in (params or {}).items() if k in SHADOW_PARAMS}
        doc = {**own, "model": model, "messages": messages, "max_tokens": max_tokens, "stream": False}
        body = json.dumps(doc)
        headers = [*self._headers, ("content-type", "application/json"), (SHADOW_HEADER, "1")]
        slots = self._upstream.slots
        if not slots.try_take():  # never in line with the clients' requests for an upstream slot
            raise UpstreamFull("no upstream slot free for a shadow call")
        try:
            async with self._upstream.request("POST", CHAT_PATH, b"", headers, body.encode()) as resp:
                status, raw = resp.status, response_headers(resp.raw_headers)
                data = await resp.read()
        except aiohttp.ClientError as exc:  # translated so the breaker sees a connection failure
            raise ConnectionError(f"upstream request failed: {type(exc).__name__}") from exc
        finally:
            slots.give()
        if not 200 <= status < 300:
            raise UpstreamStatusError(status)
        doc = json.loads(_decoded(raw, data, self._cap))
        return shadow_reply(self._names, doc, served_by_headers(raw), self.prices(target))

    def candidates(self, model: str) -> Sequence[str]:
        """None of its own: the upstream's fallbacks are not visible (``shadow.candidates`` names them)."""
        return ()

    def prices(self, model: str) -> tuple[float, float] | None:
        """Per-token prices from litellm's cost map, by requested then canonical name (``None``: unknown)."""
        return cost_map_prices(self._request_models.get(model, model)) or cost_map_prices(model)


def shadow_sources(
    upstream: Upstream, names: ModelNames, request_models: Mapping[str, str], reply_cap: int
) -> Callable[[Sequence[tuple[str, str]]], ShadowSource | None]:
    """Per served request (its forwarded headers), the source of its shadow call; call on the serving loop."""

    def source(headers: Sequence[tuple[str, str]]) -> ShadowSource | None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # pragma: no cover - turns finish inside the serving loop
            return None
        creds = [(k, v) for k, v in headers if k.lower() in CREDENTIAL_HEADERS]
        return UpstreamShadow(upstream, names, loop, creds, request_models, reply_cap)

    return source
