"""Shadow calls through a wrapped OpenAI-compatible client: the same client, retries off.

The runtime's ``ShadowRunner`` names canonical models; the call asks for
``shadow.request_models[target]`` (default: the canonical name) as the request's ``model``,
so that must be a name the endpoint accepts (a LiteLLM Proxy's model groups, OpenAI's
model names). The call goes to the client itself, not through the wrapper, so it is never
recorded as a turn; it carries the header ``x-handoffmon-shadow: 1``. Behind a LiteLLM
Proxy its response headers say which model answered, so a proxy fallback is seen as
another author (``wrong_author``) and dropped.

An ``AsyncOpenAI`` client belongs to the event loop the application awaits it on: its
shadow call runs as a task on that loop (``call_on_loop``), started by the runner's thread
and never awaited by the application.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from handoffmon.attribution import ModelNames
from handoffmon.ingress import served_by_headers
from handoffmon.prices import cost_map_prices
from handoffmon.runtime.shadow_calls import SHADOW_HEADER, call_on_loop, shadow_reply
from handoffmon.shadow.turns import SHADOW_PARAMS, Params, ShadowReply

SHADOW_HEADERS = {SHADOW_HEADER: "1"}
"""Header of every shadow call: a proxy or gateway can tell it from served traffic."""


def client_timeout(client: Any) -> float | None:
    """The seconds a client (an ``OpenAI`` or a ``with_options(timeout=...)`` copy of it) waits for
    an answer: a number as it is, an ``httpx.Timeout``'s ``read``; ``None`` when it has none (no
    timeout, ``NOT_GIVEN``, anything else)."""
    timeout: Any = getattr(client, "timeout", None)
    if hasattr(timeout, "read"):  # httpx.Timeout: read bounds the wait for the reply
        timeout = timeout.read
    if type(timeout) in (int, float) and timeout > 0:
        return float(timeout)
    return None


class OpenAIShadow:
    """A ``ShadowSource`` over one synchronous OpenAI-compatible client.

    Args:
        client: the application's ``openai.OpenAI`` (or a look-alike).
        names: canonical model names (the monitor's).
        request_models: target → the ``model`` to request (``shadow.request_models``).
    """

    def __init__(
        self, client: Any, names: ModelNames, request_models: Mapping[str, str] | None = None
    ) -> None:
        self._client = client
        self._names = names
        self._request_models = dict(request_models or {})

    def call(
        self, target: str, messages: list[Any], *, max_tokens: int, timeout_s: float, params: Params = None
    ) -> ShadowReply:
        """Ask ``target`` for a continuation, without retries, with the served request's ``params``;
        raises what the client raises."""
        completions, kwargs = self._request(target, messages, max_tokens, timeout_s, params)
        raw = getattr(getattr(completions, "with_raw_response", None), "create", None)
        if raw is None:
            response, headers = completions.create(**kwargs), None
        else:
            answer = raw(**kwargs)
            response, headers = answer.parse(), answer.headers
        return shadow_reply(self._names, response, served_by_headers(headers), self.prices(target))

    def _request(
        self, target: str, messages: list[Any], max_tokens: int, timeout_s: float, params: Params = None
    ) -> tuple[Any, dict[str, Any]]:
        """(``chat.completions`` of the client without retries, the call's arguments); the call's
        timeout is the smaller of ``timeout_s`` and the client's own (``client_timeout``)."""
        client = self._client
        timeout_s = self._timeout(timeout_s)
        with_options = getattr(client, "with_options", None)
        if callable(with_options):
            client = with_options(max_retries=0, timeout=timeout_s)
        kwargs = {
            **{k: v for k, v in (params or {}).items() if k in SHADOW_PARAMS},
            "model": self._request_models.get(target, target),
            "messages": messages,
            "max_tokens": max_tokens,
            "timeout": timeout_s,
            "extra_headers": dict(SHADOW_HEADERS),
        }
        return client.chat.completions, kwargs

    def _timeout(self, timeout_s: float) -> float:
        own = client_timeout(self._client)
        return timeout_s if own is None else min(timeout_s, own)

    def candidates(self, model: str) -> Sequence[str]:
        """None of its own: a client has no fallbacks (``shadow.candidates`` names them)."""
        return ()

    def prices(self, model: str) -> tuple[float, float] | None:
        """Per-token prices from litellm's cost map (``None`` without litellm or an entry)."""
        return cost_map_prices(self._request_models.get(model, model)) or cost_map_prices(model)


class AsyncOpenAIShadow(OpenAIShadow):
    """A ``ShadowSource`` over an ``openai.AsyncOpenAI`` client, calling on the application's loop.

    Args:
        client: the application's ``openai.AsyncOpenAI`` (or a look-alike).
        names: canonical model names (the monitor's).
        loop: the event loop the served turn ran on (the client's connections live there).
        request_models: target → the ``model`` to request (``shadow.request_models``).
    """

    def __init__(
        self,
        client: Any,
        names: ModelNames,
        loop: asyncio.AbstractEventLoop,
        request_models: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(client, names, request_models)
        self._loop = loop

    def call(
        self, target: str, messages: list[Any], *, max_tokens: int, timeout_s: float, params: Params = None
    ) -> ShadowReply:
        """Ask ``target`` on the application's loop, without retries, with the served request's
        ``params``; raises what the client raises."""
        timeout_s = self._timeout(timeout_s)
        return call_on_loop(
            self._loop, lambda: self._call(target, messages, max_tokens, timeout_s, params), timeout_s
        )

    async def _call(
        self, target: str, messages: list[Any], max_tokens: int, timeout_s: float, params: Params = None
    ) -> ShadowReply:
        completions, kwargs = self._request(target, messages, max_tokens, timeout_s, params)
        raw = getattr(getattr(completions, "with_raw_response", None), "create", None)
        if raw is None:
            response, headers = await completions.create(**kwargs), None
        else:
            answer = await raw(**kwargs)
            response, headers = answer.parse(), answer.headers
            if inspect.isawaitable(response):  # the non-legacy raw response parses asynchronously
                response = await response
        return shadow_reply(self._names, response, served_by_headers(headers), self.prices(target))
