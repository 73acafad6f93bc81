"""What the in-process adapters share for Responses API calls: the call's arguments kept as of
the call, its input read as chat messages, and the one notice for calls that cannot be read;
and for every call, the reply read from its response, or counted when there is none to read
(:func:`readable_reply`).

``handoffmon serve`` counts requests it passes through unmonitored in
``handoffmon_proxy_unmonitored_requests_total``; a wrapper or the LiteLLM callback has no
request counter of its own, so it logs the notice once per process (not in
``monitor_errors``: passing these calls through is the documented scope, not a failure, and
MonitorErrors would page for it).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any, get_type_hints

from handoffmon.ingress import Request, ResponseLink, reply_message
from handoffmon.ingress.apis import RESPONSES, Api
from handoffmon.ingress.responses import read_request
from handoffmon.pipeline.monitor import Monitor

_log = logging.getLogger("handoffmon.integrations")

_told: set[str] = set()


def snapshot(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A call's arguments as of the call, for reading later: the ``input`` (Responses) or
    ``messages`` (Anthropic Messages) list copied (the application appends to its own after
    the call)."""
    out = dict(kwargs)
    for key in ("input", "messages"):
        items = out.get(key)
        if type(items) is list:
            out[key] = items.copy()
    return out


def chat_messages(
    kwargs: Mapping[str, Any], *, via_litellm: bool = False
) -> tuple[list[dict[str, Any]], ResponseLink | None] | None:
    """A Responses call's ``instructions`` and ``input`` as chat messages (``read_request``),
    and its place in a history the provider stores (``Request.link``); ``None`` when it is not
    monitored (no input, or a stored history it cannot name), said once per process.

    ``via_litellm``: the call goes through LiteLLM, which passes on only the Responses
    parameters it knows; a ``conversation`` it drops is not continued by the provider, so the
    call is read as the fresh conversation the model sees (:func:`litellm_forwards_conversation`).
    """
    doc, skip, link = read_request(kwargs)
    if doc is None:
        if skip == "server_state":
            unmonitored_once(skip)
        return None
    if via_litellm and link is not None and link.conversation and not litellm_forwards_conversation():
        link = ResponseLink(link.previous, link.keep) if link.keep or link.previous else None
    messages: list[dict[str, Any]] = doc["messages"]
    return messages, link


@functools.cache
def litellm_forwards_conversation() -> bool:
    """Whether the installed LiteLLM passes a Responses call's ``conversation`` on to the
    provider (1.108 does not: it drops parameters its ``ResponsesAPIRequestParams`` lacks).
    Only called from LiteLLM's adapters, where LiteLLM is imported already."""
    try:
        from litellm.types.llms.openai import ResponsesAPIRequestParams

        return "conversation" in get_type_hints(ResponsesAPIRequestParams)
    except Exception:  # another LiteLLM layout: assume it passes the call on as sent
        return True


def api_messages(
    kwargs: Mapping[str, Any], api: Api, *, via_litellm: bool = False
) -> tuple[list[dict[str, Any]], ResponseLink | None] | None:
    """A call of ``api`` (``ingress.apis``) read as chat messages, and its link to a stored
    history (Responses calls only: :func:`chat_messages`); ``None`` when it is not monitored."""
    if api is RESPONSES:
        return chat_messages(kwargs, via_litellm=via_litellm)
    doc = api.read_request(kwargs)[0]
    return None if doc is None else (doc["messages"], None)


def linked(request: Request, link: ResponseLink | None) -> Request:
    """``request`` with the Responses call's ``link`` (``chat_messages``)."""
    return request if link is None else request._replace(link=link)


UNMONITORED = {
    "server_state": "handoffmon: Responses API calls naming both previous_response_id and "
    "conversation, or a conversation without an id, are not monitored: which stored history they "
    "continue is not known.",
    "output_format": "handoffmon: Anthropic messages.stream(output_format=...) calls are passed "
    "to the SDK's own stream helper and not monitored; messages.create and messages.parse are.",
}
"""The kinds of call the in-process adapters pass through unmonitored, and what is said of them."""


def readable_reply(monitor: Monitor, doc: Any) -> dict[str, Any] | None:
    """The first choice's assistant message of ``doc`` (a chat completion, or another API's
    response read as one); ``None`` when there is none to read — no choice (``choices: []``
    or ``null``), a choice without a message, not a completion at all — which is no turn,
    counted as an answer without a reply (``status="unreadable"``), as ``serve`` counts it
    (and ``unmonitored{reason="bad_reply"}``). Never raises."""
    reply = reply_message(doc)
    if reply is None:
        monitor.count_no_reply("unreadable")
    return reply


def unmonitored_once(reason: str) -> None:
    """Log once per process that calls of kind ``reason`` (``UNMONITORED``) are passed through
    unmonitored: an application whose calls are not seen is not left unaware."""
    if reason in _told:
        return
    _told.add(reason)
    _log.warning(UNMONITORED[reason])
