"""An Anthropic-like ``POST /v1/messages`` upstream (raw ASGI): JSON messages and event streams.

Shaped like Anthropic's own API: no authorship headers, so ``serve`` learns who answered from
the message's ``model``. Deterministic (same request → same bytes). The depth of a request is
its number of user messages with text (tool results alone do not count); the author is
``x-mock-model`` or ``mock_upstream.schedule(depth)``. A user message containing
``use the tool`` is answered with a thinking block and a ``tool_use`` block (no text) until the
conversation ends with its ``tool_result``. Every answer starts with a thinking block, as
extended thinking's do. ``x-mock-status`` answers that error status; ``x-mock-cut-after``
ends a stream after that many events, without ``message_stop``; ``x-mock-error-after`` ends
it after that many events (0: at once) with an ``error`` event (``overloaded_error``, as the
API sends mid-stream).
``x-mock-stop-reason`` answers that ``stop_reason``; ``x-mock-content: thinking`` keeps only the
thinking block, ``x-mock-content: empty`` no block at all (``content: []``). A ``json_schema`` output format
(``output_config.format``, structured outputs) is answered with the text as JSON
(``{"answer", "depth"}``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from tests.proxy.mock_upstream import read_request, schedule
from tests.proxy.responses_upstream import send_body

TOOL_WORDS = "use the tool"


def messages_text(model: str, depth: int) -> str:
    return f"Message {depth} from {model}: " + "a sentence with words, " * 4 + "done."


def _texts(msg: dict[str, Any]) -> list[str]:
    content = msg.get("content")
    if isinstance(content, str):
        return [content]
    return [b.get("text", "") for b in content or () if isinstance(b, dict) and b.get("type") == "text"]


def _depth(req: dict[str, Any]) -> int:
    return sum(1 for m in req["messages"] if m.get("role") == "user" and _texts(m)) or 1


def _wants_tool(req: dict[str, Any]) -> bool:
    users = [m for m in req["messages"] if m.get("role") == "user"]
    if not users:
        return False
    last = users[-1]
    answered = isinstance(last.get("content"), list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in last["content"]
    )
    return not answered and any(TOOL_WORDS in t for t in _texts(last))


@dataclass
class MessagesUpstream:
    """The ASGI app; ``seen`` holds every request body it received."""

    seen: list[bytes] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    """The headers of each request in ``seen``."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = await read_request(scope, receive, send)
        if body is None:
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.seen.append(body)
        self.headers.append(headers)
        if scope["path"] != "/v1/messages" or scope["method"] != "POST":
            await send_body(
                send, 404, b'{"type": "error", "error": {"type": "not_found_error", "message": "no route"}}'
            )
            return
        if "x-mock-status" in headers:
            err = b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'
            await send_body(send, int(headers["x-mock-status"]), err)
            return
        req = json.loads(body)
        depth = _depth(req)
        model = headers.get("x-mock-model") or schedule(depth)
        digest = hashlib.sha256(body).hexdigest()[:20]
        content: list[dict[str, Any]] = [
            {"type": "thinking", "thinking": f"thinking {digest}", "signature": "sig"}
        ]
        if _wants_tool(req):
            content.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_{digest}",
                    "name": "lookup",
                    "input": {"query": f"depth {depth}", "n": 1},
                }
            )
            reason = "tool_use"
        else:
            text = messages_text(model, depth)
            if ((req.get("output_config") or {}).get("format") or {}).get("type") == "json_schema":
                text = json.dumps({"answer": text, "depth": depth})  # structured outputs
            content.append({"type": "text", "text": text})
            reason = "end_turn"
        reason = headers.get("x-mock-stop-reason", reason)
        if headers.get("x-mock-content") in ("thinking", "empty"):
            content = content[:1] if headers["x-mock-content"] == "thinking" else []
        message = {
            "id": f"msg_{digest}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": reason,
            "stop_sequence": None,
            "usage": {"input_tokens": 12 * depth, "output_tokens": 30},
        }
        if req.get("stream"):
            await self._stream(
                send,
                message,
                int(headers.get("x-mock-cut-after", "0")),
                int(headers.get("x-mock-error-after", "-1")),
            )
        else:
            await send_body(send, 200, json.dumps(message).encode())

    async def _stream(
        self, send: Any, message: dict[str, Any], cut_after: int, error_after: int = -1
    ) -> None:
        start = {
            **message,
            "content": [],
            "stop_reason": None,
            "usage": {**message["usage"], "output_tokens": 1},
        }
        events: list[dict[str, Any]] = [{"type": "message_start", "message": start}, {"type": "ping"}]
        for i, block in enumerate(message["content"]):
            if block["type"] == "text":
                events.append(
                    {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}
                )
                for k in range(0, len(block["text"]), 7):
                    delta = {"type": "text_delta", "text": block["text"][k : k + 7]}
                    events.append({"type": "content_block_delta", "index": i, "delta": delta})
            elif block["type"] == "tool_use":
                events.append(
                    {"type": "content_block_start", "index": i, "content_block": {**block, "input": {}}}
                )
                raw = json.dumps(block["input"])
                for k in range(0, len(raw), 6):
                    delta = {"type": "input_json_delta", "partial_json": raw[k : k + 6]}
                    events.append({"type": "content_block_delta", "index": i, "delta": delta})
            else:
                events.append(
                    {"type": "content_block_start", "index": i, "content_block": {**block, "thinking": ""}}
                )
                delta = {"type": "thinking_delta", "thinking": block["thinking"]}
                events.append({"type": "content_block_delta", "index": i, "delta": delta})
                events.append(
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "signature_delta", "signature": "sig"},
                    }
                )
            events.append({"type": "content_block_stop", "index": i})
        events.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": 30},
            }
        )
        events.append({"type": "message_stop"})
        if cut_after:
            events = events[:cut_after]
        if error_after >= 0:
            error = {"type": "overloaded_error", "message": "Overloaded"}
            events = [*events[:error_after], {"type": "error", "error": error}]
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        for event in events:
            data = f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
            await send({"type": "http.response.body", "body": data, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
