"""An upstream whose every reply is scripted by the test: raw SSE pieces, cut-offs, gzip bombs.

A request names its script with ``x-script: <id>`` (the same id direct and through
``serve``, so both get the same bytes). A script is a status, a header list and the body
pieces sent one ``send`` each (a float among them: a pause of that many seconds, a slow
upstream); ``cut=True`` raises after the last piece, so uvicorn drops the connection without
the final chunk: an upstream that breaks a stream off. The upstream records the raw request
headers it received (``seen``) and each body's size and SHA-256 (``received``).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Any

from tests.proxy.mock_upstream import read_request


@dataclass
class Script:
    """One scripted reply."""

    pieces: list[bytes | float]
    status: int = 200
    headers: list[tuple[bytes, bytes]] = field(
        default_factory=lambda: [(b"content-type", b"text/event-stream")]
    )
    cut: bool = False


def sse(*events: Any, done: bool = True) -> list[bytes]:
    """Body pieces of an event stream: dicts as JSON ``data:`` events, bytes sent verbatim."""
    import json

    pieces = [e if isinstance(e, bytes) else f"data: {json.dumps(e)}\n\n".encode() for e in events]
    return [*pieces, b"data: [DONE]\n\n"] if done else pieces


class UpstreamCut(Exception):
    """Raised by the scripted upstream to break a response off."""


class ScriptedUpstream:
    """The ASGI app (a plain class: its repr stays short in hypothesis reports)."""

    def __init__(self) -> None:
        self.scripts: dict[str, Script] = {}
        self.seen: list[list[tuple[bytes, bytes]]] = []
        self.received: list[tuple[int, str]] = []
        self._ids = itertools.count()

    def __repr__(self) -> str:
        return f"ScriptedUpstream({len(self.scripts)} scripts)"

    def add(self, script: Script) -> str:
        """Register a script; returns its id (send it as ``x-script``)."""
        sid = f"s{next(self._ids)}"
        self.scripts[sid] = script
        return sid

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = await read_request(scope, receive, send)
        if body is None:
            return
        self.seen.append(list(scope["headers"]))
        self.received.append((len(body), hashlib.sha256(body).hexdigest()))
        sid = dict(scope["headers"]).get(b"x-script", b"").decode()
        script = self.scripts.get(sid)
        if script is None:
            await send({"type": "http.response.start", "status": 404, "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return
        await send({"type": "http.response.start", "status": script.status, "headers": script.headers})
        for piece in script.pieces:
            if isinstance(piece, float):
                await asyncio.sleep(piece)
                continue
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        if script.cut:
            raise UpstreamCut("scripted cut-off")
        await send({"type": "http.response.body", "body": b"", "more_body": False})
