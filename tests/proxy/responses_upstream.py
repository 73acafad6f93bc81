"""An OpenAI-like ``POST /v1/responses`` upstream (raw ASGI): JSON responses and event streams.

Shaped like OpenAI's own API, not LiteLLM's: no authorship headers, so ``serve`` learns who
answered from the response's ``model``. Deterministic (same request → same bytes). The depth of
a request is its number of user messages, counting those of the stored response it continues
(``previous_response_id``; an id it never answered is a 400, as OpenAI's) or of the
``conversation`` it continues; the author is
``x-mock-model`` or ``mock_upstream.schedule(depth)``. A user message containing
``use the tool`` is answered with a reasoning item and a ``function_call`` (no text) until the
input ends with the call's output.
Every answer starts with a reasoning item, as reasoning models' do. ``x-mock-status`` answers
that error status; ``x-mock-cut-after`` ends a stream after that many events, without its
terminal event. A ``json_schema`` text format (structured outputs) is answered with the text as
JSON (``{"answer", "depth"}``).

A ``background`` call (not streamed) answers ``queued`` with no output; ``GET
.../responses/{id}`` then answers ``in_progress`` ``x-mock-polls`` times (a header of the
call, default 0), then the finished response; ``POST .../responses/{id}/cancel`` makes it
``cancelled``, ``DELETE .../responses/{id}`` deletes it (then a 404), as OpenAI's.
``x-mock-final-status`` (``incomplete``, ``failed``, ``cancelled``) finishes any call — JSON,
background or streamed (its terminal event ``response.incomplete`` / ``response.failed``) — in
that status instead of ``completed`` (``incomplete`` for ``max_output_tokens``, ``failed`` with
a ``server_error``); ``x-mock-final-output: none`` leaves only the reasoning item in its output
(its tokens all spent on reasoning).
``x-mock-gzip`` (any value) answers JSON under ``Content-Encoding: gzip``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from tests.proxy.mock_upstream import read_request, schedule

TOOL_WORDS = "use the tool"
RESPONSES_PATHS = ("/v1/responses", "/openai/v1/responses", "/openai/responses")
"""OpenAI's path and Azure OpenAI's two (its ``/openai/v1`` API and ``?api-version=`` one)."""
RESPONSE_PATH = re.compile(r"(?:/v1|/openai/v1|/openai)/responses/([^/]+)(/cancel)?")


def responses_text(model: str, depth: int) -> str:
    return f"Response {depth} from {model}: " + "a sentence with words, " * 4 + "done."


def _users(req: dict[str, Any]) -> int:
    items = req.get("input")
    if isinstance(items, str):
        return 1
    return sum(1 for i in items if isinstance(i, dict) and i.get("role") == "user")


def _depth(req: dict[str, Any]) -> int:
    return _users(req) or 1


def _wants_tool(req: dict[str, Any]) -> bool:
    items = req.get("input")
    if not isinstance(items, list) or not items:
        return False
    users = [i for i in items if isinstance(i, dict) and i.get("role") == "user"]
    last = items[-1]
    asked = bool(users) and TOOL_WORDS in json.dumps(users[-1].get("content"))
    return asked and not (isinstance(last, dict) and last.get("type") == "function_call_output")


@dataclass
class ResponsesUpstream:
    """The ASGI app; ``seen`` holds every request body it received."""

    seen: list[bytes] = field(default_factory=list)
    stored: dict[str, int] = field(default_factory=dict)
    """Response id → its depth (user messages through it): the chains it can continue."""
    conversations: dict[str, int] = field(default_factory=dict)
    """Conversation id → its depth so far (``conversation``: a string or ``{"id"}``)."""
    background: dict[str, list[Any]] = field(default_factory=dict)
    """Background response id → [its finished response, ``in_progress`` polls left, cancelled]."""
    polled: list[str] = field(default_factory=list)
    """The paths of every retrieve, cancel and delete it received."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = await read_request(scope, receive, send)
        if body is None:
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.seen.append(body)
        one = RESPONSE_PATH.fullmatch(scope["path"])
        if one is not None:
            self.polled.append(f"{scope['method']} {scope['path']}")
            await self._one(send, scope["method"], one.group(1), one.group(2) is not None, headers)
            return
        if scope["path"] not in RESPONSES_PATHS or scope["method"] != "POST":
            await send_body(send, 404, b'{"error": {"message": "no route", "type": "not_found"}}')
            return
        if "x-mock-status" in headers:
            err = b'{"error": {"message": "upstream overloaded", "type": "server_error"}}'
            await send_body(send, int(headers["x-mock-status"]), err)
            return
        req = json.loads(body)
        previous = req.get("previous_response_id")
        if previous is not None and previous not in self.stored:
            err = {
                "message": f"Previous response with id '{previous}' not found.",
                "type": "invalid_request_error",
            }
            await send_body(send, 400, json.dumps({"error": err}).encode())
            return
        conversation = req.get("conversation")
        if isinstance(conversation, dict):
            conversation = conversation.get("id")
        if conversation is not None:
            depth = max(1, self.conversations.get(conversation, 0) + _users(req))
            self.conversations[conversation] = depth
        else:
            depth = _depth(req) if previous is None else max(1, self.stored[previous] + _users(req))
        model = headers.get("x-mock-model") or schedule(depth)
        digest = hashlib.sha256(body).hexdigest()[:20]
        output: list[dict[str, Any]] = [
            {"type": "reasoning", "id": f"rs_{digest}", "summary": [], "encrypted_content": "opaque" + digest}
        ]
        if _wants_tool(req):
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_{digest}",
                    "call_id": f"call_{digest}",
                    "name": "lookup",
                    "arguments": json.dumps({"query": f"depth {depth}"}),
                    "status": "completed",
                }
            )
        else:
            text = responses_text(model, depth)
            if ((req.get("text") or {}).get("format") or {}).get(
                "type"
            ) == "json_schema":  # structured outputs
                text = json.dumps({"answer": text, "depth": depth})
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{digest}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            )
        final_status = headers.get("x-mock-final-status", "completed")
        if headers.get("x-mock-final-output") == "none":
            output = output[:1]
        response = {
            "id": f"resp_{digest}",
            "object": "response",
            "created_at": 1700000000,
            "model": model,
            "status": "completed",
            "error": None,
            "incomplete_details": None,
            "instructions": req.get("instructions"),
            "metadata": req.get("metadata") or {},
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": req.get("tools") or [],
            "usage": {"input_tokens": 12 * depth, "output_tokens": 30, "total_tokens": 12 * depth + 30},
        }
        if final_status != "completed":
            response = _finished_as(response, final_status)
        if req.get("background") and not req.get("stream"):  # the reply comes later (retrieve)
            final = response
            self.background[response["id"]] = [final, int(headers.get("x-mock-polls", "0")), False]
            response = {**response, "status": "queued", "output": [], "usage": None, **_UNSET}
        if req.get("store") is not False:
            self.stored[response["id"]] = depth
        if req.get("stream"):
            await self._stream(send, response, int(headers.get("x-mock-cut-after", "0")))
        else:
            await send_body(send, 200, json.dumps(response).encode(), "x-mock-gzip" in headers)

    async def _one(self, send: Any, method: str, rid: str, cancel: bool, headers: dict[str, str]) -> None:
        """``GET`` / ``DELETE .../responses/{id}``, ``POST .../responses/{id}/cancel``."""
        if "x-mock-status" in headers:
            err = b'{"error": {"message": "upstream overloaded", "type": "server_error"}}'
            await send_body(send, int(headers["x-mock-status"]), err)
            return
        held = self.background.get(rid)
        if held is None or (method, cancel) not in (("GET", False), ("DELETE", False), ("POST", True)):
            err = {"message": f"Response with id '{rid}' not found.", "type": "invalid_request_error"}
            await send_body(send, 404, json.dumps({"error": err}).encode())
            return
        final, polls, cancelled = held
        if method == "DELETE":
            del self.background[rid]
            gone = {"id": rid, "object": "response", "deleted": True}
            await send_body(send, 200, json.dumps(gone).encode())
            return
        if cancel:
            held[2] = cancelled = True
        if cancelled:
            doc = {**final, "status": "cancelled", "output": [], "usage": None}
        elif polls > 0:
            held[1] = polls - 1
            doc = {**final, "status": "in_progress", "output": [], "usage": None, **_UNSET}
        else:
            doc = final
        await send_body(send, 200, json.dumps(doc).encode(), "x-mock-gzip" in headers)

    async def _stream(self, send: Any, response: dict[str, Any], cut_after: int) -> None:
        start = {**response, "status": "in_progress", "output": [], "usage": None, **_UNSET}
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": start},
            {"type": "response.in_progress", "response": start},
        ]
        for index, item in enumerate(response["output"]):
            if item["type"] == "message":
                text = item["content"][0]["text"]
                events.append(
                    {
                        "type": "response.output_item.added",
                        "output_index": index,
                        "item": {**item, "content": []},
                    }
                )
                part = {"type": "output_text", "text": "", "annotations": []}
                events.append(
                    {
                        "type": "response.content_part.added",
                        "item_id": item["id"],
                        "output_index": index,
                        "content_index": 0,
                        "part": part,
                    }
                )
                for i, word in enumerate(text.split(" ")):
                    events.append(
                        {
                            "type": "response.output_text.delta",
                            "item_id": item["id"],
                            "output_index": index,
                            "content_index": 0,
                            "delta": word if i == 0 else " " + word,
                        }
                    )
                events.append(
                    {
                        "type": "response.output_text.done",
                        "item_id": item["id"],
                        "output_index": index,
                        "content_index": 0,
                        "text": text,
                    }
                )
            elif item["type"] == "function_call":
                events.append(
                    {
                        "type": "response.output_item.added",
                        "output_index": index,
                        "item": {**item, "arguments": ""},
                    }
                )
                events.append(
                    {
                        "type": "response.function_call_arguments.delta",
                        "item_id": item["id"],
                        "output_index": index,
                        "delta": item["arguments"],
                    }
                )
            else:
                events.append({"type": "response.output_item.added", "output_index": index, "item": item})
            events.append({"type": "response.output_item.done", "output_index": index, "item": item})
        terminal = {"incomplete": "response.incomplete", "failed": "response.failed"}
        events.append({"type": terminal.get(response["status"], "response.completed"), "response": response})
        if cut_after:
            events = events[:cut_after]
        head = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        for seq, event in enumerate(events):
            data = f"event: {event['type']}\ndata: {json.dumps({**event, 'sequence_number': seq})}\n\n"
            await send({"type": "http.response.body", "body": data.encode(), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


_UNSET = {"error": None, "incomplete_details": None}
"""An unfinished response's ``error`` and ``incomplete_details``."""


def _finished_as(response: dict[str, Any], status: str) -> dict[str, Any]:
    """``response`` finished in ``status`` (``incomplete``: cut at ``max_output_tokens``;
    ``failed``: a server error), its output as it is."""
    doc = {**response, "status": status}
    if status == "incomplete":
        doc["incomplete_details"] = {"reason": "max_output_tokens"}
    elif status == "failed":
        doc["error"] = {"code": "server_error", "message": "The model failed to generate a response."}
    return doc


async def send_body(send: Any, status: int, body: bytes, gzipped: bool = False) -> None:
    """Answer ``status`` with a JSON ``body`` (``gzipped``: under ``Content-Encoding: gzip``)."""
    headers = [(b"content-type", b"application/json")]
    if gzipped:
        body = gzip.compress(body)
        headers.append((b"content-encoding", b"gzip"))
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
