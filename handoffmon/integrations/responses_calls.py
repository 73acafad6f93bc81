"""What the in-process adapters share for Responses API calls: the call's arguments kept as of
the call, its input read as chat messages, and the one notice for calls that cannot be read.

``handoffmon serve`` counts requests it passes through unmonitored in
``handoffmon_proxy_unmonitored_requests_total``; a wrapper or the LiteLLM callback has no
request counter of its own, so it logs the notice once per process (not in
``monitor_errors``: passing these calls through is the documented scope, not a failure, and
MonitorErrors would page for it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from handoffmon.ingress import Request, ResponseLink
from handoffmon.ingress.responses import read_request

_log = logging.getLogger("handoffmon.integrations")

_told: set[str] = set()


def snapshot(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A call's arguments as of the call, for reading later: the ``input`` list copied (the
    application appends to its own after the call)."""
    items = kwargs.get("input")
    return {**kwargs, "input": items.copy()} if type(items) is list else dict(kwargs)


def chat_messages(kwargs: Mapping[str, Any]) -> tuple[list[dict[str, Any]], ResponseLink | None] | None:
    """A Responses call's ``instructions`` and ``input`` as chat messages (``read_request``),
    and its place in a chain of stored responses (``Request.link``); ``None`` when it is not
    monitored (a ``conversation`` object, no input), said once per process."""
    doc, skip, link = read_request(kwargs)
    if doc is None:
        _unmonitored_once(skip)
        return None
    messages: list[dict[str, Any]] = doc["messages"]
    return messages, link


def linked(request: Request, link: ResponseLink | None) -> Request:
    """``request`` with the Responses call's ``link`` (``chat_messages``)."""
    return request if link is None else request._replace(link=link)


def _unmonitored_once(reason: str | None) -> None:
    """Log once per process that calls of kind ``reason`` are passed through unmonitored
    (``server_state``: an application whose every call continues a ``conversation`` object is
    not silently unseen)."""
    if reason != "server_state" or reason in _told:
        return
    _told.add(reason)
    _log.warning(
        "handoffmon: Responses API calls that continue a `conversation` object are not monitored: "
        "their history is kept by the provider under no response id the request names. Chain "
        "calls with previous_response_id, or send the history in `input`, to have them monitored."
    )
