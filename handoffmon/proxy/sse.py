"""Rebuild a chat completion from its SSE chunks (for the monitor) without touching the bytes sent on."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _ToolCall:
    id: str = ""
    type: str = "function"
    name: str = ""
    arguments: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "function": {"name": self.name, "arguments": "".join(self.arguments)},
        }


class ChatStreamAccumulator:
    """Feed it the raw bytes of an OpenAI-style ``text/event-stream``; read the reply at the end.

    Only choice 0 is accumulated (the one a chat client continues with). Events may be
    split across reads at any byte; ``data: [DONE]`` and non-JSON events are ignored.
    Unparseable chunks are counted in ``bad_events``, never raised.
    """

    def __init__(self, max_buffer_bytes: int = 1 << 20) -> None:
        self._buf = b""
        self._max_buffer = max_buffer_bytes
        self._content: list[str] = []
        self._saw_content = False
        self._tools: dict[int, _ToolCall] = {}
        self.role = "assistant"
        self.model: str | None = None
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.done = False
        self.events = 0
        self.bad_events = 0

    def feed(self, data: bytes) -> None:
        """Consume the next bytes of the stream."""
        buf = self._buf + data if self._buf else data
        buf = buf.replace(b"\r\n", b"\n") if b"\r" in buf else buf
        *events, rest = buf.split(b"\n\n")
        self._buf = rest if len(rest) <= self._max_buffer else b""
        for event in events:
            self._event(event)

    def close(self) -> None:
        """End of stream: handle a last event that had no blank line after it."""
        if self._buf.strip():
            self._event(self._buf)
        self._buf = b""

    def _event(self, event: bytes) -> None:
        lines = [ln[5:].lstrip() for ln in event.split(b"\n") if ln.startswith(b"data:")]
        if not lines:
            return
        payload = b"\n".join(lines)
        if payload == b"[DONE]":
            self.done = True
            return
        self.events += 1
        try:
            chunk = json.loads(payload)
        except (ValueError, RecursionError):
            self.bad_events += 1
            return
        if isinstance(chunk, dict):
            self._chunk(chunk)

    def _chunk(self, chunk: dict[str, Any]) -> None:
        if isinstance(chunk.get("model"), str) and chunk["model"]:
            self.model = chunk["model"]
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._delta(delta)

    def _delta(self, delta: dict[str, Any]) -> None:
        if isinstance(delta.get("role"), str):
            self.role = delta["role"]
        content = delta.get("content")
        if isinstance(content, str):
            self._saw_content = True
            self._content.append(content)
        for call in delta.get("tool_calls") or ():
            if isinstance(call, dict):
                self._tool_delta(call)

    def _tool_delta(self, call: dict[str, Any]) -> None:
        slot = self._tools.setdefault(int(call.get("index", len(self._tools))), _ToolCall())
        if call.get("id"):
            slot.id = str(call["id"])
        if call.get("type"):
            slot.type = str(call["type"])
        fn = call.get("function")
        if isinstance(fn, dict):
            if fn.get("name"):
                slot.name += str(fn["name"])
            if isinstance(fn.get("arguments"), str):
                slot.arguments.append(fn["arguments"])

    @property
    def text(self) -> str:
        """The reply text so far."""
        return "".join(self._content)

    def message(self) -> dict[str, Any]:
        """The assistant message as the client will resend it in its next request."""
        msg: dict[str, Any] = {"role": self.role, "content": self.text if self._saw_content else None}
        if self._tools:
            msg["tool_calls"] = [self._tools[i].as_dict() for i in sorted(self._tools)]
        return msg
