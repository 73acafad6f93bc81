"""An OpenAI-compatible upstream as an httpx MockTransport (answers like a LiteLLM Proxy would)."""

from __future__ import annotations

import json
from typing import Any

import httpx

PROXY_HEADERS = {
    "x-litellm-model-id": "dep-b",
    "x-litellm-model-name": "openai/gpt-b",
    "x-litellm-model-group": "backup",
    "x-litellm-attempted-fallbacks": "1",
    "x-litellm-attempted-retries": "2",
}


def _completion(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-b-2024",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
    }


def _sse(text: str) -> bytes:
    events = []
    for i, piece in enumerate(text.split(" ")):
        delta = {"content": piece if i == 0 else " " + piece}
        chunk = {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-b-2024",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
        }
        events.append(f"data: {json.dumps(chunk)}\n\n")
    events.append("data: [DONE]\n\n")
    return "".join(events).encode()


class Upstream:
    """Replies ``reply {n}`` to the n-th request; keeps the request bodies."""

    def __init__(self, headers: dict[str, str] | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers = PROXY_HEADERS if headers is None else headers

    def reply_text(self, n: int) -> str:
        return f"reply number {n}"

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        text = self.reply_text(len(self.requests))
        if body.get("stream"):
            headers = {**self.headers, "content-type": "text/event-stream"}
            return httpx.Response(200, headers=headers, content=_sse(text))
        return httpx.Response(200, headers=self.headers, json=_completion(text))
