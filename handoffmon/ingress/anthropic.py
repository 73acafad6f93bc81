"""The Anthropic Messages API read as chat: request bodies, message objects and event streams.

A Messages request carries its system prompt as ``system`` and its history as ``messages``
whose ``content`` is a string or a list of typed blocks; a response carries the reply as
``content`` blocks; a stream is a sequence of typed events (``message_start``,
``content_block_*``, ``message_delta``, ``message_stop``). Translated here into the chat shapes
the rest of ingress reads (``RequestParser``, ``reply_message``, ``describe_response``,
``StreamOutcome``), as ``ingress.responses`` does for the Responses API (ADR 0012).

One rule makes attribution work across turns: a response's ``content`` blocks, translated as
a reply, and the same blocks sent back as the next request's assistant message, translated as
history, give the same assistant message. ``text`` blocks are its text; ``tool_use`` blocks
(and the server tools' ``server_tool_use``) its ``tool_calls``, their ``input`` as canonical
JSON (sorted keys, no spaces) on both sides, so a streamed call's ``input_json_delta`` pieces
and the object sent back compare equal; ``thinking`` and ``redacted_thinking`` blocks are
skipped on both sides. In a user message, ``tool_result`` blocks become ``tool`` messages in
place.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from handoffmon.ingress.chunks import (
    MAX_REPLY_CHARS,
    MAX_TOOL_CALLS,
    EventFolder,
    Pieces,
    StreamOutcome,
    parts_content,
    said_nothing,
)
from handoffmon.ingress.conversation import SESSION_KEY
from handoffmon.ingress.fields import get, text_of, token_count
from handoffmon.ingress.request import ResponseLink
from handoffmon.ingress.responses import NoReply

_SKIPPED_BLOCKS = frozenset(("thinking", "redacted_thinking"))
_CALL_BLOCKS = frozenset(("tool_use", "server_tool_use"))
_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
"""``stop_reason`` → chat ``finish_reason`` (``pause_turn`` and unknown reasons: none)."""
_NO_REPLY = {"refusal": "refusal", "max_tokens": "incomplete", "model_context_window_exceeded": "incomplete"}
"""``stop_reason`` of an answer that, with no text and no tool call, is no turn → its
``NoReply`` status (``types.NO_REPLY_STATUSES``)."""


class AnthropicRequest(NamedTuple):
    """A Messages request body read as a chat body (``doc``), or why it is not monitored."""

    doc: dict[str, Any] | None
    """``{"model", "messages", "metadata", "litellm_session_id"}`` for ``RequestParser.http_body``."""
    skip: str | None
    """``"no_messages"`` when ``doc`` is ``None``."""
    link: ResponseLink | None = None
    """Always ``None``: the Messages API keeps no history at the provider."""


def _kind(block: Any) -> str | None:
    """A block's ``type``: the string, ``None`` when absent, ``"?"`` when it is something else
    (hostile input: never a set member lookup on an unhashable value)."""
    kind = get(block, "type")
    return kind if kind is None or isinstance(kind, str) else "?"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else text_of(value or "")


def canonical_input(value: Any) -> str:
    """A tool call's ``input`` as the chat ``arguments`` string: canonical JSON of the object
    (a streamed call's joined ``partial_json`` is parsed first, so both forms compare equal)."""
    if isinstance(value, str):
        raw: str = value
        try:
            value = json.loads(raw) if raw else {}
        except (ValueError, RecursionError):
            return raw
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return text_of(value)


def _call(block: Any) -> dict[str, Any]:
    call_id, name = get(block, "id"), get(block, "name")
    return {
        "id": _text(call_id),
        "type": "function",
        "function": {"name": _text(name), "arguments": canonical_input(get(block, "input"))},
    }


def assistant_message(content: Any) -> dict[str, Any]:
    """An assistant message's (or a response's) ``content`` as one chat assistant message."""
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    parts: list[Any] = []
    calls: list[dict[str, Any]] = []
    for block in content if isinstance(content, (list, tuple)) else ():
        kind = _kind(block)
        if isinstance(block, str):
            parts.append({"type": "text", "text": block})
        elif kind in _SKIPPED_BLOCKS:
            continue
        elif kind == "text":
            parts.append({"type": "text", "text": _text(get(block, "text"))})
        elif kind in _CALL_BLOCKS:
            calls.append(_call(block))
        else:  # a server tool's result, or a block type this version does not know: kept as is
            parts.append(block if isinstance(block, dict) else {"type": str(kind)})
    msg: dict[str, Any] = {"role": "assistant", "content": parts_content(parts)}
    if calls:
        msg["tool_calls"] = calls
    return msg


def _result_text(content: Any) -> Any:
    """A ``tool_result`` block's ``content`` (a string or blocks) as chat tool content."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, (list, tuple)):
        parts = [
            {"type": "text", "text": _text(get(b, "text"))} if _kind(b) == "text" else b
            for b in content
            if isinstance(b, dict)
        ]
        return parts_content(parts) or ""
    return text_of(content)


def _user_messages(role: str, content: Any) -> list[dict[str, Any]]:
    """A user (or other non-assistant) message as chat messages: its ``tool_result`` blocks as
    ``tool`` messages in place, the blocks around them as messages of ``role``."""
    if not isinstance(content, (list, tuple)):
        return [{"role": role, "content": content if isinstance(content, str) else _text(content)}]
    out: list[dict[str, Any]] = []
    parts: list[Any] = []
    for block in content:
        kind = _kind(block)
        if kind == "tool_result":
            if parts:
                out.append({"role": role, "content": parts_content(parts)})
                parts = []
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": _text(get(block, "tool_use_id")),
                    "content": _result_text(get(block, "content")),
                }
            )
        elif isinstance(block, str):
            parts.append({"type": "text", "text": block})
        elif kind == "text":
            parts.append({"type": "text", "text": _text(get(block, "text"))})
        elif kind not in _SKIPPED_BLOCKS:
            parts.append(block if isinstance(block, dict) else {"type": str(kind)})
    if parts or not out:
        out.append({"role": role, "content": parts_content(parts)})
    return out


def _system(system: Any) -> str | None:
    if isinstance(system, str):
        return system or None
    if isinstance(system, (list, tuple)):
        texts = [_text(get(b, "text")) for b in system if _kind(b) == "text"]
        return "\n".join(texts) or None
    return None


def read_request(body: Any) -> AnthropicRequest:
    """A ``POST /v1/messages`` body (or ``messages.create`` keyword arguments) as a chat body;
    never raises on odd input."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), (list, tuple)):
        return AnthropicRequest(None, "no_messages")
    messages: list[dict[str, Any]] = []
    system = _system(body.get("system"))
    if system is not None:
        messages.append({"role": "system", "content": system})
    turns = body["messages"]
    for msg in turns:
        role, content = get(msg, "role"), get(msg, "content")
        if role == "assistant":
            messages.append(assistant_message(content))
        else:
            messages.extend(_user_messages(role if isinstance(role, str) and role else "user", content))
    if turns and get(turns[-1], "role") == "assistant":
        # The Messages API continues a trailing assistant message (a prefill): said in chat the
        # way LiteLLM, DeepSeek and Mistral say it, so it is no earlier turn (attribution)
        messages[-1]["prefix"] = True
    doc: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    if isinstance(body.get("metadata"), dict):
        doc["metadata"] = body["metadata"]
    if body.get(SESSION_KEY) is not None:
        doc[SESSION_KEY] = body[SESSION_KEY]
    return AnthropicRequest(doc, None)


def message_as_chat(message: Any) -> dict[str, Any] | None:
    """A Messages API response (JSON dict or SDK object) as a chat completion document:
    ``choices[0].message`` its reply, ``usage`` its token counts; ``None`` when it has no
    ``content`` list (not a message)."""
    content = get(message, "content")
    if not isinstance(content, (list, tuple)):
        return None
    reason = get(message, "stop_reason")
    usage = get(message, "usage")
    doc: dict[str, Any] = {
        "id": get(message, "id"),
        "object": "chat.completion",
        "model": get(message, "model"),
        "choices": [
            {
                "index": 0,
                "message": assistant_message(content),
                "finish_reason": _FINISH.get(reason) if isinstance(reason, str) else None,
            }
        ],
    }
    if usage is not None:
        doc["usage"] = {
            "prompt_tokens": get(usage, "input_tokens"),
            "completion_tokens": get(usage, "output_tokens"),
        }
    return doc


def no_reply(reason: Any, message: dict[str, Any]) -> NoReply | None:
    """The :class:`~handoffmon.ingress.responses.NoReply` of a message that stopped for
    ``reason`` and whose reply read as chat is ``message``: stopped for ``refusal`` (the API's
    classifier) or cut at ``max_tokens`` (every token spent on thinking) before any text or
    tool call. Recorded, it would be an empty reply failing every rule, as a Responses API
    answer ``incomplete`` without output would. ``None`` when it is a turn: any text (a refusal
    that says something is a real reply), a tool call, or any other stop reason (an
    ``end_turn`` with ``content: []`` is what the model chose to say, as a Responses API answer
    ``completed`` without output is)."""
    status = _NO_REPLY.get(reason) if isinstance(reason, str) else None
    return NoReply(status) if status is not None and said_nothing(message) else None


def answer_as_chat(message: Any) -> dict[str, Any] | NoReply | None:
    """:func:`message_as_chat` of a (non-streamed) Messages API response, or its ``NoReply``
    when it stopped without a reply (:func:`no_reply`): the ``Api.as_chat`` of ``MESSAGES``."""
    doc = message_as_chat(message)
    if doc is None:
        return None
    return no_reply(get(message, "stop_reason"), doc["choices"][0]["message"]) or doc


class MessagesStreamFolder(EventFolder):
    """Folds a Messages API event stream (SDK events or decoded JSON) into a ``StreamOutcome``.

    The blocks are rebuilt from ``content_block_start`` and their deltas (text, and a tool
    call's ``partial_json``), then read as a response. ``message_stop`` ends the stream
    (``done``). Never raises; events it cannot read count in ``odd``. Bounded as
    ``ChunkFolder``: at most ``MAX_TOOL_CALLS`` blocks are kept, and text, tool input and other
    blocks (as JSON) past ``max_chars`` make the outcome ``too_large`` with nothing kept.

    Args:
        max_chars: characters of text and tool input kept before nothing more is.
    """

    def __init__(self, max_chars: int = MAX_REPLY_CHARS) -> None:
        super().__init__(max_chars)
        self._blocks: dict[int, dict[str, Any]] = {}
        self._pieces: dict[int, Pieces] = {}
        self._id: str | None = None
        self._model: str | None = None
        self._reason: str | None = None
        self._usage: dict[str, Any] = {}

    def _event(self, event: Any) -> None:
        kind = get(event, "type")
        if not isinstance(kind, str):
            self.odd += 1
        elif kind == "message_start":
            message = get(event, "message")
            rid, model = get(message, "id"), get(message, "model")
            self._id = rid if isinstance(rid, str) else self._id
            self._model = model if isinstance(model, str) else self._model
            self._take_usage(get(message, "usage"))
        elif kind == "content_block_start":
            index, block = int(get(event, "index")), get(event, "content_block")
            if _kind(block) in _SKIPPED_BLOCKS:
                return
            if index not in self._blocks and len(self._blocks) >= MAX_TOOL_CALLS:
                self.odd += not self.too_large  # a block past the bound: lost, counted
                return
            kept = {"type": _kind(block) or "text"}
            for key in ("text", "id", "name"):
                value = get(block, key)
                if isinstance(value, str):
                    kept[key] = value
            if kept["type"] in _CALL_BLOCKS:  # input its start carries whole (no deltas follow)
                kept["input"] = get(block, "input")
                self._count(len(canonical_input(kept["input"])) if kept["input"] else 0)
            elif kept["type"] != "text":  # kept whole (a server tool's result): its JSON counts
                kept = block if isinstance(block, dict) else {"type": kept["type"]}
                if not self._count(len(json.dumps(kept, ensure_ascii=False, default=str))):
                    return
            self._blocks[index] = kept
            self._pieces[index] = Pieces()
            self._count(len(kept.get("text") or "") if kept.get("type") == "text" else 0)
        elif kind == "content_block_delta":
            index, delta = int(get(event, "index")), get(event, "delta")
            dkind = _kind(delta)
            if index not in self._blocks:
                if dkind in ("text_delta", "input_json_delta") and not self.too_large:
                    self.odd += 1  # text of a block never started (or past the bound): lost, counted
                return
            piece = get(delta, "text") if dkind == "text_delta" else get(delta, "partial_json")
            if (
                dkind in ("text_delta", "input_json_delta")
                and isinstance(piece, str)
                and self._count(len(piece))
            ):
                self._pieces[index].add(piece)
        elif kind == "message_delta":
            reason = get(get(event, "delta"), "stop_reason")
            self._reason = reason if isinstance(reason, str) else self._reason
            self._take_usage(get(event, "usage"))
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            self.error = True

    def _take_usage(self, usage: Any) -> None:
        for key in ("input_tokens", "output_tokens"):
            value = token_count(get(usage, key))
            if value is not None:
                self._usage[key] = value

    def _forget(self) -> None:
        self._blocks.clear()
        self._pieces.clear()

    def _message(self) -> dict[str, Any]:
        content: list[Any] = []
        for index in sorted(self._blocks):
            block, pieces = self._blocks[index], "".join(self._pieces[index])
            kind = _kind(block)  # a block kept whole is the upstream's: its type may be anything
            if kind == "text":
                content.append({"type": "text", "text": block.get("text", "") + pieces})
            elif kind in _CALL_BLOCKS:
                content.append({**block, "input": pieces or block.get("input")})
            else:
                content.append(block)
        return {
            "id": self._id,
            "model": self._model,
            "content": content,
            "stop_reason": self._reason,
            "usage": self._usage,
        }

    def outcome(self, *, completed: bool) -> StreamOutcome:
        """The folded reply so far."""
        doc = message_as_chat(self._message())
        assert doc is not None  # _message always has a content list
        (choice,) = doc["choices"]
        reply = {"role": "assistant", "content": None} if self.too_large else choice["message"]
        nothing = None
        if self.failed_silent(reply):
            nothing = NoReply("error")  # the upstream failed it before any text
        elif not self.too_large:
            nothing = no_reply(self._reason, reply)
        return StreamOutcome(
            reply=reply,
            deployment_ids=(),
            response_model=self._model,
            response_id=self._id,
            finish_reason=choice["finish_reason"],
            input_tokens=self._usage.get("input_tokens"),
            output_tokens=self._usage.get("output_tokens"),
            completed=completed and self.done and not self.error,  # message_stop: the API always ends so
            chunks=self.chunks,
            odd=self.odd,
            too_large=self.too_large,
            no_reply=nothing.status if nothing is not None else None,
        )
