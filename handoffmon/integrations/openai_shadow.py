"""Shadow calls through a wrapped OpenAI-compatible client: the same client, retries off.

The runtime's ``ShadowRunner`` names canonical models; the call asks for that name as the
request's ``model``, so shadow targets must be model names the endpoint accepts (a LiteLLM
Proxy's model groups, OpenAI's model names). The call goes to the client itself, not
through the wrapper, so it is never recorded as a turn; it carries the header
``x-handoffmon-shadow: 1``. Behind a LiteLLM Proxy its response headers say which model
answered, so a proxy fallback is seen as another author (``wrong_author``) and dropped.
Only synchronous clients make shadow calls (the runner's threads are not an event loop).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from handoffmon.attribution import ModelNames
from handoffmon.ingress import served_by_headers
from handoffmon.integrations.router_shadow import cost_map_prices, shadow_reply
from handoffmon.shadow.turns import ShadowReply

SHADOW_HEADERS = {"x-handoffmon-shadow": "1"}
"""Header of every shadow call: a proxy or gateway can tell it from served traffic."""


class OpenAIShadow:
    """A ``ShadowSource`` over one synchronous OpenAI-compatible client.

    Args:
        client: the application's ``openai.OpenAI`` (or a look-alike).
        names: canonical model names (the monitor's).
    """

    def __init__(self, client: Any, names: ModelNames) -> None:
        self._client = client
        self._names = names

    def call(self, target: str, messages: list[Any], *, max_tokens: int, timeout_s: float) -> ShadowReply:
        """Ask ``target`` for a continuation, without retries; raises what the client raises."""
        client = self._client
        with_options = getattr(client, "with_options", None)
        if callable(with_options):
            client = with_options(max_retries=0, timeout=timeout_s)
        completions = client.chat.completions
        kwargs = {
            "model": target,
            "messages": messages,
            "max_tokens": max_tokens,
            "timeout": timeout_s,
            "extra_headers": dict(SHADOW_HEADERS),
        }
        raw = getattr(getattr(completions, "with_raw_response", None), "create", None)
        if raw is None:
            response, headers = completions.create(**kwargs), None
        else:
            answer = raw(**kwargs)
            response, headers = answer.parse(), answer.headers
        return shadow_reply(self._names, response, served_by_headers(headers), self.prices(target))

    def candidates(self, model: str) -> Sequence[str]:
        """None of its own: a client has no fallbacks (``shadow.candidates`` names them)."""
        return ()

    def prices(self, model: str) -> tuple[float, float] | None:
        """Per-token prices from litellm's cost map (``None`` without litellm or an entry)."""
        return cost_map_prices(model)
