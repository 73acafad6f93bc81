"""What a queued turn keeps alive of the application's request, weighed against
``pipeline.max_queued_bytes``.

A finished turn waits in the attribution queue (``pipeline.attribution_queue_size`` turns) with
its copy of the request's message list, and so keeps the application's messages alive after
the call returned: a server's request payloads live until the attribution thread gets to them.
The queue bounds how many turns wait, not how large they are, so turns with large histories
(a 100k-message list, a megabyte of base64 image in a part) take their size from the byte
budget, as ``serve``'s raw bodies do, and are dropped and counted when it is spent. Small
histories weigh nothing: the queue's length bounds them, and the request path stays free of
the budget's lock. Nor is a history scanned at all while the attribution thread keeps up
(:func:`weigh`): only once 16 turns wait.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.pipeline.monitor import Monitor

SMALL_BYTES = 64 * 1024
"""A history estimated below this weighs nothing (1,000 queued turns of it: 64 MiB at most)."""

SAMPLED = 256
"""Messages read to estimate a longer history (its first ones, scaled to its length)."""


MESSAGE_BYTES = 256
"""What one message dict keeps alive besides its text: the dict (184 bytes) and its role and
content string objects, as a server that parsed the request's JSON holds them (tracemalloc:
193 bytes a message built from literals, 245 parsed from JSON). 340,000 empty messages are
~83 MB, not the 2.7 MB of their list slots."""


def held_bytes(messages: Any) -> int:
    """Estimated bytes a queued copy of ``messages`` keeps alive: 8 per list slot,
    :data:`MESSAGE_BYTES` per message dict, plus the text of each message's ``content`` (a
    string, or the strings inside its parts, down to ``image_url.url``); 0 below
    :data:`SMALL_BYTES`, and for anything but a list or tuple. Reads at most :data:`SAMPLED`
    messages, scaled to the list's length; never raises (it runs on the request path)."""
    if type(messages) is not list and type(messages) is not tuple:  # what the adapters copy
        return 0  # (a sequence of another type could raise from len or a slice)
    n = len(messages)
    sample = messages[:SAMPLED] if n > SAMPLED else messages
    text = 0
    try:
        for m in sample:  # the usual shape inline: this runs on the request path
            if type(m) is dict:
                content = m.get("content")
                text += MESSAGE_BYTES
            else:
                content = _content(m)
            text += len(content) if type(content) is str else _size(content)
    except Exception:  # a hostile message object: weigh its slots only
        text = 0
    total = 8 * n + (text * n // len(sample) if n > SAMPLED else text)
    return total if total >= SMALL_BYTES else 0


def weigh(monitor: Monitor, messages: Any) -> int:
    """A finishing turn's weight: :func:`held_bytes` of its history when turns back up for the
    attribution thread (``Monitor.backlogged``), else 0, so the scan (2-4 µs for 40 messages)
    stays off the usual request path. At most ``monitor.UNWEIGHED_TURNS`` (16) unweighed
    histories are held beside ``pipeline.max_queued_bytes``."""
    return held_bytes(messages) if monitor.backlogged() else 0


def weigh_call(monitor: Monitor, kwargs: Mapping[str, Any]) -> int:
    """:func:`weigh` of a call's arguments: its ``messages`` or Responses ``input``."""
    items = kwargs.get("messages")
    return weigh(monitor, items if items is not None else kwargs.get("input"))


def _content(message: Any) -> Any:
    if type(message) is dict:
        return message.get("content")
    if isinstance(message, str):
        return message
    return getattr(message, "content", None)


def _size(value: Any, depth: int = 0) -> int:
    if isinstance(value, str):
        return len(value)
    if depth >= 3:  # a part's fields' fields (``image_url.url``) are the deepest read
        return 0
    if isinstance(value, (list, tuple)):
        return sum(_size(v, depth + 1) for v in value[:SAMPLED])
    if isinstance(value, Mapping):
        return sum(_size(v, depth + 1) for v in list(value.values())[:16])
    return 0
