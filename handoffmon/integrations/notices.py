"""Notices the in-process adapters log once per process about calls they pass through unmonitored.

``handoffmon serve`` counts such requests in ``handoffmon_proxy_unmonitored_requests_total``; a
wrapper or the LiteLLM callback has no request counter of its own, so it says it here (not in
``monitor_errors``: passing these calls through is the documented scope, not a failure, and
MonitorErrors would page for it).
"""

from __future__ import annotations

import logging

_log = logging.getLogger("handoffmon.integrations")

_told: set[str] = set()


def unmonitored_once(reason: str | None) -> None:
    """Log once per process that calls of kind ``reason`` are passed through unmonitored
    (``server_state``: an application whose every call carries ``previous_response_id`` is not
    silently unseen)."""
    if reason != "server_state" or reason in _told:
        return
    _told.add(reason)
    _log.warning(
        "handoffmon: Responses API calls that continue server-side state (previous_response_id or "
        "conversation) are not monitored: their history is kept by the provider, not sent in the "
        "request. Send the history in `input` (store=False) to have them monitored."
    )
