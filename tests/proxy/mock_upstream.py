"""A LiteLLM-like mock upstream (raw ASGI) and a helper serving any ASGI app on loopback in a thread.

The mock answers ``POST /v1/chat/completions`` (and Azure OpenAI's paths for it, ``CHAT_PATHS``
and ``AZURE_DEPLOYMENT``) deterministically (same request → same
bytes) with LiteLLM Proxy's authorship headers, as JSON or SSE. Request headers steer it:
``x-mock-model`` (who answers), ``x-mock-fallbacks``, ``x-mock-delay-s`` (before
answering), ``x-mock-status`` (error status), ``x-mock-chunk-delay-s`` and
``x-mock-chunks`` (slow/long streams; a request's ``n`` gives that many choices, ``choice_text``,
interleaved when streamed), ``x-mock-gzip`` (gzip the JSON body). A request
for ``model-a``/``model-b`` is answered by that model; ``model-dead`` always answers 503. A
``json_schema`` response format (structured outputs) is answered with the text as JSON
(``{"answer", "depth"}``). It records what it received in ``seen``.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pydantic
import uvicorn

MODELS = ("model-a", "model-b")
CHAT_PATHS = ("/v1/chat/completions", "/openai/v1/chat/completions")
"""OpenAI's chat completions path and Azure OpenAI's OpenAI-compatible one."""
AZURE_DEPLOYMENT = re.compile(r"/openai/deployments/[^/]+/chat/completions")
"""An Azure OpenAI deployment's chat completions (answered only with an ``api-version`` query)."""
DEPLOYMENTS = {"model-a": "dep-a-1", "model-b": "dep-b-1"}
DEAD_MODEL = "model-dead"
"""A model the upstream knows but that never answers (503): a dead shadow target."""


CANONICAL_MODELS = {f"openai/{m}": m for m in MODELS}
"""``attribution.canonical_models`` naming the models as the requests do (the mock's
``x-litellm-model-name`` header says ``openai/<model>``)."""


class Answer(pydantic.BaseModel):
    """What the mock (and ``responses_upstream``) answer a ``json_schema`` format with."""

    answer: str
    depth: int


def schedule(depth: int) -> str:
    """Default author by depth: model-b on every third turn, so conversations see handoffs."""
    return MODELS[1] if depth % 3 == 0 else MODELS[0]


def reply_text(model: str, depth: int) -> str:
    return f"Turn {depth} answer from {model}. " + "Some content here, with words. " * 3


def choice_text(text: str, i: int) -> str:
    """Choice ``i``'s text of a reply whose first choice says ``text`` (``n > 1``)."""
    return text if i == 0 else f"{text}Variant {i}."


def _choices(req: dict[str, Any]) -> int:
    n = req.get("n")
    return n if type(n) is int and 1 <= n <= 128 else 1


async def read_request(scope: dict[str, Any], receive: Any, send: Any) -> bytes | None:
    """An ASGI request's whole body; ``None`` after answering a lifespan scope (startup/shutdown)."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return None
    body = b""
    while True:
        msg = await receive()
        body += msg.get("body", b"")
        if not msg.get("more_body"):
            return body


@dataclass
class Seen:
    """One request the mock received."""

    path: str
    headers: dict[str, str]
    body: bytes
    query: str = ""


@dataclass
class MockUpstream:
    """The ASGI app; ``seen`` lists requests, ``cancelled`` counts streams cut by the client."""

    seen: list[Seen] = field(default_factory=list)
    cancelled: int = 0
    completed_streams: int = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = await read_request(scope, receive, send)
        if body is None:
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        path, query = scope["path"], scope.get("query_string", b"").decode()
        self.seen.append(Seen(path, headers, body, query))
        if path == "/v1/models" and scope["method"] == "GET":
            data = json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in MODELS]})
            await _send(send, 200, data.encode(), [(b"x-upstream", b"models")])
        elif path in CHAT_PATHS and scope["method"] == "POST":
            await self._chat(headers, body, receive, send)
        elif AZURE_DEPLOYMENT.fullmatch(path) and scope["method"] == "POST":
            if "api-version=" not in query:  # as Azure OpenAI: a deployment's calls need one
                err = {"error": {"code": "404", "message": "Resource not found"}}
                await _send(send, 404, json.dumps(err).encode(), [])
                return
            await self._chat(headers, body, receive, send)
        else:
            err = {"error": {"message": f"upstream: no route {scope['path']}", "type": "not_found"}}
            await _send(send, 404, json.dumps(err).encode(), [(b"x-upstream", b"404")])

    async def _chat(self, headers: dict[str, str], body: bytes, receive: Any, send: Any) -> None:
        delay = float(headers.get("x-mock-delay-s", "0"))
        if delay:
            gone = asyncio.ensure_future(receive())
            done, _ = await asyncio.wait({gone}, timeout=delay)
            if done:  # the caller hung up while we were "thinking"
                self.cancelled += 1
                return
            gone.cancel()
        if "x-mock-status" in headers:
            err = {"error": {"message": "upstream overloaded", "type": "server_error"}}
            await _send(
                send, int(headers["x-mock-status"]), json.dumps(err).encode(), [(b"retry-after", b"1")]
            )
            return
        try:
            if headers.get("content-encoding") == "gzip":  # a compressed request, as a server may take
                body = gzip.decompress(body)
            req = json.loads(body)
            messages = req["messages"]
        except (ValueError, KeyError, TypeError, RecursionError, OSError, EOFError):
            err = {"error": {"message": "invalid request body", "type": "upstream_bad_request"}}
            await _send(send, 400, json.dumps(err).encode(), [])
            return
        depth = sum(1 for m in messages if m.get("role") == "assistant") + 1
        asked = req.get("model")
        if asked == DEAD_MODEL:
            err = {"error": {"message": f"{DEAD_MODEL} is down", "type": "server_error"}}
            await _send(send, 503, json.dumps(err).encode(), [])
            return
        model = headers.get("x-mock-model") or (asked if asked in MODELS else schedule(depth))
        cid = "chatcmpl-" + hashlib.sha256(body).hexdigest()[:24]
        extra = [
            (b"x-litellm-model-id", DEPLOYMENTS.get(model, model).encode()),
            (b"x-litellm-model-name", f"openai/{model}".encode()),
            (b"x-litellm-attempted-fallbacks", headers.get("x-mock-fallbacks", "0").encode()),
            (b"x-litellm-attempted-retries", b"0"),
            (b"x-litellm-model-group", str(req.get("model")).encode()),
            (b"x-request-echo", cid.encode()),
        ]
        text = reply_text(model, depth)
        if (req.get("response_format") or {}).get("type") == "json_schema":  # structured outputs
            text = json.dumps({"answer": text, "depth": depth})
        if req.get("stream"):
            await self._stream(receive, send, cid, model, text, extra, headers, _choices(req))
            return
        doc = {
            "id": cid,
            "object": "chat.completion",
            "created": 1700000000,
            "model": model,
            "choices": [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": choice_text(text, i)},
                    "finish_reason": "stop",
                }
                for i in range(_choices(req))
            ],
            "usage": {"prompt_tokens": 10 * depth, "completion_tokens": 20, "total_tokens": 10 * depth + 20},
        }
        payload = json.dumps(doc).encode()
        if headers.get("x-mock-gzip"):
            payload = gzip.compress(payload, mtime=0)
            extra.append((b"content-encoding", b"gzip"))
        await _send(send, 200, payload, extra)

    async def _stream(
        self, receive: Any, send: Any, cid: str, model: str, text: str, extra: Any, headers: Any, n: int = 1
    ) -> None:
        """Stream ``n`` choices (``choice_text``) word by word, their chunks interleaved as
        OpenAI's are: one choice per chunk, each choice's role first and finish reason last."""
        chunk_delay = float(headers.get("x-mock-chunk-delay-s", "0"))
        n_chunks = int(headers.get("x-mock-chunks", "0"))
        start = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"), *extra]
        await send({"type": "http.response.start", "status": 200, "headers": start})
        base = {"id": cid, "object": "chat.completion.chunk", "created": 1700000000, "model": model}

        def chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice: dict[str, Any] = {"index": index, "delta": delta}
            if finish:
                choice["finish_reason"] = finish
            return {**base, "choices": [choice]}

        pieces = []
        for index in range(n):
            words = [f"w{i}" for i in range(n_chunks)] if n_chunks else choice_text(text, index).split(" ")
            pieces.append([w if i == 0 else " " + w for i, w in enumerate(words)])
        events = [chunk(index, {"role": "assistant", "content": ""}) for index in range(n)]
        for i in range(max(len(p) for p in pieces)):
            events += [chunk(index, {"content": p[i]}) for index, p in enumerate(pieces) if i < len(p)]
        events += [chunk(index, {}, "stop") for index in range(n)]
        gone = asyncio.ensure_future(receive())  # resolves with http.disconnect if the proxy hangs up
        try:
            for ev in events:
                if gone.done():
                    self.cancelled += 1
                    return
                data = f"data: {json.dumps(ev)}\n\n".encode()
                await send({"type": "http.response.body", "body": data, "more_body": True})
                if chunk_delay:
                    await asyncio.sleep(chunk_delay)
            await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
            self.completed_streams += 1
        finally:
            gone.cancel()


async def _send(send: Any, status: int, body: bytes, extra: list[tuple[bytes, bytes]]) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class ServerThread:
    """Serve an ASGI app with uvicorn on 127.0.0.1:<free port> in a daemon thread."""

    def __init__(self, app: Any, port: int, **config: Any) -> None:
        self.port = port
        options: dict[str, Any] = {"log_level": "warning", "access_log": False, **config}
        cfg = uvicorn.Config(app, host="127.0.0.1", port=port, **options)
        self.server = uvicorn.Server(cfg)
        self._thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"server on port {self.port} did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=15)
