"""What flows into shadow continuation: an integration's offer, the checked turn, the shadow reply."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple, Protocol

from handoffmon.types import CheckResult

Params = Mapping[str, Any] | None
"""The served request's generation parameters a source's ``call`` repeats (``SHADOW_PARAMS``)."""


class ShadowReply(NamedTuple):
    """A shadow call's reply.

    Attributes:
        text: the reply text (checked, then dropped; never returned or stored).
        author: canonical model that wrote it, as the response reports (``None``: unreported).
        tokens: tokens the call used (``None``: unreported; the reservation's bound stays).
        usd: what it cost (``None``: unknown).
    """

    text: str
    author: str | None
    tokens: float | None
    usd: float | None


class NoRoute(LookupError):
    """A shadow call that cannot be made: nothing serves only its target (nothing was sent)."""

    reason: ClassVar[str] = "no_route"
    """The skip reason the runner counts it under (one of ``policy.SKIP_REASONS``); a subclass
    for another cause names its own (``serve``'s ``UpstreamFull``: ``busy``)."""


class ShadowSource(Protocol):
    """What an integration supplies: the call itself, and the facts only it knows.

    A source may also have ``routable(target) -> bool``: whether it can send a call to
    ``target`` now (a Router: some group serves only that model); a target it cannot reach is
    skipped as ``no_route`` before any budget is reserved. Without it every target is routable.
    """

    def call(self, target: str, messages: list[Any], *, max_tokens: int, timeout_s: float) -> ShadowReply:
        """Ask ``target`` (canonical model) to continue ``messages``, without fallbacks or retries;
        raises ``NoRoute`` when it sent nothing because nothing serves the target. The sources of
        ``handoffmon`` also take ``params``: the served request's ``SHADOW_PARAMS`` to repeat
        (``WithRequestParams`` passes them)."""
        ...

    def candidates(self, model: str) -> Sequence[str]:
        """Canonical models the no-handoff arm may ask to continue ``model``'s history."""
        ...

    def prices(self, model: str) -> tuple[float, float] | None:
        """(USD per input token, USD per output token) of ``model``, ``None`` when unknown."""
        ...


NO_VERDICT = "no_verdict"
"""Skip reason (``ShadowOffer.unsent``) of a turn whose served reply got no ``pass`` or ``fail``
(every rule ``not_applicable``, errored, or none ran): no shadow reply could form a pair with it."""


class ShadowOffer(NamedTuple):
    """Attached by an integration to a finished turn (``Monitor.finish(shadow=...)``).

    Attributes:
        source: the integration that can make the shadow call.
        messages: the request's messages (the snapshot the parser took), to continue.
        unsent: why the turn is not to be continued, a skip reason: its history cannot be sent as
            chat (``history_stored``, ``history_not_chat``; see ``unsent_history``) or its served
            reply got no verdict to pair with (``no_verdict``, set by the check stage); ``None``
            when it can be.
    """

    source: ShadowSource
    messages: list[Any]
    unsent: str | None = None

    def __repr__(self) -> str:  # no message content in reprs
        return f"ShadowOffer(messages={len(self.messages)})"


class ShadowTurn(NamedTuple):
    """A checked turn offered for shadow continuation (built on a check worker thread).

    Attributes:
        offer: the integration's offer.
        conversation_id: the turn's conversation (the pairs' cluster).
        prefix_model: author of the history's last assistant message (A).
        author: who served the turn.
        served: the served reply's verdicts.
        evaluate: runs the same rules, with the same context, on another reply.
    """

    offer: ShadowOffer
    conversation_id: str
    prefix_model: str
    author: str
    served: tuple[CheckResult, ...]
    evaluate: Callable[[str], tuple[CheckResult, ...]]

    def __repr__(self) -> str:
        return f"ShadowTurn({self.prefix_model!r}→{self.author!r})"


def offer_of(
    source: ShadowSource,
    messages: list[Any],
    link: Any = None,
    api: bool = False,
    request: Mapping[str, Any] | None = None,
) -> ShadowOffer:
    """An integration's offer of a turn: a chat completion's messages as they are; a Responses
    or Messages API call's (``api``) as read as chat, with why they cannot be sent, if they cannot
    (``link``: the request's ``ResponseLink``, naming a stored history).

    ``request``: the served chat completion's arguments (its keyword arguments or body), so the
    shadow call is made with the same generation parameters (``SHADOW_PARAMS``) — without them a
    rule those parameters act on compares a reply made with them to one made without. Read on the
    shadow thread, not here: pass a mapping nobody changes after the call."""
    if request is not None and not api:
        source = WithRequestParams(source, request)
    if not api:
        return ShadowOffer(source, messages)
    stored = link is not None and bool(link.previous or link.conversation)
    return ShadowOffer(source, messages, unsent_history(messages, stored))


SHADOW_PARAMS = frozenset({
    "temperature", "top_p", "response_format", "stop", "seed", "presence_penalty",
    "frequency_penalty", "reasoning_effort",
})  # fmt: skip
"""The served request's parameters a shadow call repeats: those that shape the text the rules
check. Not credentials, routing, metadata, streaming or anything else of the request; its
``max_tokens`` / ``max_completion_tokens`` only lower ``shadow.max_output_tokens`` (the bound the
budget reserved). Not its ``tools``: a shadow reply that only calls a tool would be checked as an
empty text (served replies that only call tools are never shadowed)."""


def shadow_params(request: Mapping[str, Any]) -> tuple[dict[str, Any], int | None]:
    """(the ``SHADOW_PARAMS`` the request set, not None; the smaller of its ``max_tokens`` and
    ``max_completion_tokens``, ``None`` when it set neither as a positive integer)."""
    params = {k: v for k, v in request.items() if k in SHADOW_PARAMS and v is not None}
    caps = [
        v
        for v in (request.get("max_tokens"), request.get("max_completion_tokens"))
        if type(v) is int and v > 0
    ]
    return params, (min(caps) if caps else None)


REQUEST_KEYS = SHADOW_PARAMS | {"max_tokens", "max_completion_tokens"}
"""The keys of a request ``shadow_params`` reads."""


def request_params(request: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the ``REQUEST_KEYS`` a request has, nothing else of it (credentials, metadata):
    for ``offer_of(request=...)`` when the caller keeps changing its own mapping after the call."""
    return {k: request[k] for k in REQUEST_KEYS if k in request}


class WithRequestParams:
    """A ``ShadowSource`` asking its source with the served request's generation parameters.

    Args:
        source: the integration's source (its ``call`` takes ``params``).
        request: the served call's arguments (read when the shadow call is made).
    """

    __slots__ = ("_request", "source")

    def __init__(self, source: ShadowSource, request: Mapping[str, Any]) -> None:
        self.source = source
        self._request = request

    def __repr__(self) -> str:  # no request content in reprs
        return f"WithRequestParams({self.source!r})"

    def call(self, target: str, messages: list[Any], *, max_tokens: int, timeout_s: float) -> ShadowReply:
        params, cap = shadow_params(self._request)
        limit = max_tokens if cap is None else min(cap, max_tokens)
        call: Any = self.source.call
        return call(target, messages, max_tokens=limit, timeout_s=timeout_s, params=params)  # type: ignore[no-any-return]

    @property
    def routable(self) -> Callable[[str], bool] | None:
        """The source's ``routable``, if it has one."""
        return getattr(self.source, "routable", None)

    def candidates(self, model: str) -> Sequence[str]:
        return self.source.candidates(model)

    def prices(self, model: str) -> tuple[float, float] | None:
        return self.source.prices(model)


_CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


def unsent_history(messages: Sequence[Any], stored: bool) -> str | None:
    """Why a Responses or Messages API turn's history, read as chat, cannot be continued through
    the chat completions API, which is how every shadow call is made; ``None`` when it can.

    ``history_stored``: the call continues a history the provider keeps (``previous_response_id``
    or ``conversation``: ``stored``), so the request holds only its newest input.
    ``history_not_chat``: a message holds what a chat request cannot carry as read: a part other
    than text (an image or a file in the other API's own shape), or a built-in tool's call (the
    reader names it after its item type, ``web_search_call``, with no arguments).
    """
    if stored:
        return "history_stored"
    for m in messages:
        if type(m) is not dict or m.get("role") not in _CHAT_ROLES:
            return "history_not_chat"
        content = m.get("content")
        if not (
            content is None
            or type(content) is str
            or (type(content) is list and all(type(p) is dict and p.get("type") == "text" for p in content))
        ):
            return "history_not_chat"
        for call in m.get("tool_calls") or ():
            fn = call.get("function") if type(call) is dict else None
            if type(fn) is not dict:
                return "history_not_chat"
            name = fn.get("name")
            if type(name) is not str or (name.endswith("_call") and not fn.get("arguments")):
                return "history_not_chat"
    return None


def prompt_bytes(messages: Sequence[Any]) -> int:
    """UTF-8 bytes of the messages as JSON: an upper bound of their content's bytes (a lone
    surrogate, which a client's JSON may carry, counted as the 3 bytes of any BMP character)."""
    return sum(
        len(json.dumps(m, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass")) for m in messages
    )


def params_bytes(source: ShadowSource) -> int:
    """UTF-8 bytes, as JSON, of the generation parameters ``source``'s calls send besides the
    messages (a ``WithRequestParams``: the served request's ``SHADOW_PARAMS``; else none): part of
    the prompt the budget bounds. A ``response_format`` JSON schema is prompt the model reads (a
    26 KB schema on a 200-byte history made the bound 482 tokens of a call using 26,917); a pydantic
    type there counts as the schema it is sent as."""
    if not isinstance(source, WithRequestParams):
        return 0
    params, _ = shadow_params(source._request)
    schema = getattr(params.get("response_format"), "model_json_schema", None)
    if isinstance(params.get("response_format"), type) and callable(schema):
        params = {**params, "response_format": schema()}
    return len(json.dumps(params, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))


def pair_verdicts(
    arm: str, served: Sequence[CheckResult], shadow: Sequence[CheckResult]
) -> dict[str, tuple[bool, bool]]:
    """Rule → (B passes, A passes) for the rules both replies got pass or fail on.

    The handoff arm served B and shadowed A; the no-handoff arm served A and shadowed B.
    """
    mine: Mapping[str, str] = {c.rule: c.verdict for c in shadow if c.verdict in ("pass", "fail")}
    out: dict[str, tuple[bool, bool]] = {}
    for c in served:
        other = mine.get(c.rule)
        if other is None or c.verdict not in ("pass", "fail"):
            continue
        s, o = c.verdict == "pass", other == "pass"
        out[c.rule] = (s, o) if arm == "handoff" else (o, s)
    return out


FAILURE_KINDS: tuple[str, ...] = ("rate_limited", "server_error", "timeout", "misconfigured", "error")
"""``failure_kind`` values; all but ``error`` trip the breaker. ``misconfigured``: 401, 403 or 404,
a target the shadow calls cannot reach as configured (its key, its permissions, its model name),
which will not heal by itself: counted as a breaker failure, so the target is probed once per
cooldown instead of called on every sampled turn (a success would close a half-open breaker).
``error``: anything else, 400 and 422 included (this request's own fault, not the target's)."""

MISCONFIGURED_STATUSES = frozenset({401, 403, 404})
"""HTTP statuses of a shadow call that say the target is misconfigured (``misconfigured``)."""


def failure_kind(exc: BaseException) -> str:
    """Classify a failed shadow call: 429, 5xx, timeout/connection, 401/403/404, or anything else."""
    status = getattr(exc, "status_code", None)
    if status == 429:
        return "rate_limited"
    if status in MISCONFIGURED_STATUSES:
        return "misconfigured"
    if isinstance(status, int) and status >= 500:
        name = type(exc).__name__.lower()
        return "timeout" if "timeout" in name else "server_error"
    name = type(exc).__name__.lower()
    if isinstance(exc, (TimeoutError, ConnectionError)) or "timeout" in name or "connection" in name:
        return "timeout"
    return "error"
