"""The OpenAI Responses API read as chat: request bodies, response objects and event streams.

A Responses request carries its history as ``input`` items and its system prompt as
``instructions``; a response carries the reply as ``output`` items. Translated here into the
chat shapes the rest of ingress reads (``RequestParser``, ``reply_message``,
``describe_response``, ``StreamOutcome``), so attribution, checks and exports do not know
which API a turn came through.

One rule makes attribution work across turns: a response's ``output`` items, translated as a
reply, and the same items echoed back in the next request's ``input``, translated as history,
give the same assistant message. Consecutive assistant-side items — ``message`` items of role
``assistant`` and tool calls (``function_call``, ``custom_tool_call`` and the built-in tools'
``*_call`` items) — form one assistant message (their text parts in order, their calls as
``tool_calls``); ``reasoning`` items are skipped on both sides.

A request continuing a stored response (``previous_response_id``) or a ``conversation``
object carries only its new input: it is read as that input, with a ``ResponseLink`` naming
what it continues, and the attributor finds the hidden history's summary under that id (ADR
0011). Not monitored: a request naming both (the API refuses it) or a conversation without an id.
"""

from __future__ import annotations

from collections.abc import Iterable
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
from handoffmon.ingress.conversation import SESSION_KEY, clean_id
from handoffmon.ingress.fields import get, text_of, token_count
from handoffmon.ingress.request import ResponseLink

CONVERSATION_KEY = "conversation"
"""The request field that continues a ``conversation`` object the provider stores."""

TERMINAL_EVENTS: dict[str, str] = {
    "response.completed": "completed",
    "response.incomplete": "incomplete",
    "response.failed": "failed",
}
"""Stream events carrying the final response object (the last event of a stream), and the
status each implies (read when the response does not say its own)."""

_TEXT_PARTS = frozenset(("text", "input_text", "output_text"))
_SKIPPED_ITEMS = frozenset(("reasoning", "item_reference"))
_TOOL_OUTPUTS = frozenset(
    (
        "function_call_output",
        "custom_tool_call_output",
        "computer_call_output",
        "local_shell_call_output",
        "shell_call_output",
        "apply_patch_call_output",
        "mcp_approval_response",
    )
)


MAX_TEXT_PARTS = 128
"""Text parts (``output_index``, ``content_index``) a Responses stream folder keeps: deltas of
further parts are skipped and counted odd (a part costs its list of pieces, however short its
text, so a stream naming a new part in every delta held state growing with its length)."""


_CALL_FIELDS = ("type", "call_id", "id", "name", "arguments", "input")
"""The fields of a tool-call output item the reply is read from (``_call``)."""
_SCALARS = frozenset((str, int, float, bool))
"""Field values kept of such an item (as ``_call`` reads them); a list or object is not."""


class ResponsesRequest(NamedTuple):
    """A Responses request body read as a chat body (``doc``), or why it is not monitored."""

    doc: dict[str, Any] | None
    """``{"model", "messages", "metadata", "litellm_session_id"}`` for ``RequestParser.http_body``."""
    skip: str | None
    """``"server_state"`` (a ``previous_response_id`` that is not a string, a ``conversation``
    without an id, or both), ``"no_messages"``."""
    link: ResponseLink | None = None
    """The call's place in a chain of stored responses (``Request.link``); ``None`` when its
    response is not stored and it continues none."""


def _kind(obj: Any) -> str | None:
    """An item's or part's ``type``: the string, ``None`` when absent, ``"?"`` when it is
    something else (hostile input: never a set member lookup on an unhashable value)."""
    kind = get(obj, "type")
    return kind if kind is None or isinstance(kind, str) else "?"


def _text_part(text: Any) -> dict[str, Any]:
    return {"type": "text", "text": text if isinstance(text, str) else text_of(text or "")}


def _parts(content: Any) -> list[Any]:
    """A message item's content as chat parts: text, input text, output text and refusals as
    ``text`` parts; other parts (images, files, audio) as they are."""
    if content is None:
        return []
    if isinstance(content, str):
        return [_text_part(content)]
    if not isinstance(content, (list, tuple)):
        return [_text_part(text_of(content))]
    out: list[Any] = []
    for part in content:
        kind = _kind(part)
        if isinstance(part, str):
            out.append(_text_part(part))
        elif kind in _TEXT_PARTS:
            out.append(_text_part(get(part, "text")))
        elif kind == "refusal":
            out.append(_text_part(get(part, "refusal")))
        else:
            out.append(part)
    return out


def _call(item: Any, kind: str) -> dict[str, Any]:
    """A tool-call item as a chat tool call (its id is the ``call_id`` the output answers)."""
    call_id = get(item, "call_id") or get(item, "id") or ""
    if kind == "function_call":
        name, arguments = get(item, "name"), get(item, "arguments")
    elif kind == "custom_tool_call":
        name, arguments = get(item, "name"), get(item, "input")
    else:  # built-in tools: the item type names the tool; its action is not the model's text
        name, arguments = kind, ""
    return {
        "id": call_id if isinstance(call_id, str) else text_of(call_id),
        "type": "function",
        "function": {
            "name": name if isinstance(name, str) else text_of(name or ""),
            "arguments": arguments if isinstance(arguments, str) else "",
        },
    }


def _output_text(output: Any) -> Any:
    if isinstance(output, str) or output is None:
        return output or ""
    if isinstance(output, (list, tuple)):
        return parts_content(_parts(output))
    return text_of(output)


class _Assistant:
    """Consecutive assistant-side items folded into one chat message."""

    __slots__ = ("calls", "parts")

    def __init__(self) -> None:
        self.parts: list[Any] = []
        self.calls: list[dict[str, Any]] = []

    def message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": parts_content(self.parts)}
        if self.calls:
            msg["tool_calls"] = self.calls
        return msg


def _assistant_side(item: Any) -> bool:
    """An item that is part of an assistant message: its text, or a tool call."""
    kind = _kind(item)
    if (kind is None or kind == "message") and get(item, "role") == "assistant":
        return True
    return isinstance(kind, str) and (kind == "custom_tool_call" or kind.endswith("_call"))


def items_as_messages(items: Iterable[Any]) -> list[dict[str, Any]]:
    """Responses ``input`` or ``output`` items as chat messages (see the module docstring)."""
    out: list[dict[str, Any]] = []
    turn: _Assistant | None = None
    for item in items:
        kind: str | None
        if isinstance(item, str):  # not in the API; read as the user's text
            kind, role = "message", "user"
        else:
            kind, role = _kind(item), get(item, "role")
        if kind in _SKIPPED_ITEMS:
            continue
        if not isinstance(item, str) and _assistant_side(item):
            turn = turn or _Assistant()
            if role == "assistant":
                turn.parts.extend(_parts(get(item, "content")))
            else:  # a tool call: _assistant_side saw a string type
                turn.calls.append(_call(item, kind or ""))
            continue
        if turn is not None:
            out.append(turn.message())
            turn = None
        if isinstance(item, str):
            out.append({"role": "user", "content": item})
        elif kind in _TOOL_OUTPUTS or (isinstance(kind, str) and kind.endswith("_output")):
            call_id = get(item, "call_id") or get(item, "approval_request_id") or get(item, "id") or ""
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": text_of(call_id),
                    "content": _output_text(get(item, "output")),
                }
            )
        elif kind is None or kind == "message":
            out.append(
                {
                    "role": role if isinstance(role, str) else "user",
                    "content": parts_content(_parts(get(item, "content"))),
                }
            )
        else:  # an item type this version does not know: a stable placeholder in the history
            out.append({"role": "user", "content": [item if isinstance(item, dict) else {"type": str(kind)}]})
    if turn is not None:
        out.append(turn.message())
    return out


def read_request(body: Any) -> ResponsesRequest:
    """A ``POST /v1/responses`` body (or ``client.responses.create`` keyword arguments) as a
    chat body; never raises on odd input."""
    if not isinstance(body, dict):
        return ResponsesRequest(None, "no_messages")
    previous = body.get("previous_response_id")
    conversation = _conversation_id(body.get(CONVERSATION_KEY))
    if (
        (previous and not isinstance(previous, str))
        or conversation == ""  # a conversation that names no id: its history cannot be found
        or (previous and conversation)  # both: the API refuses the call
    ):
        return ResponsesRequest(None, "server_state")
    raw = body.get("input")
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    if isinstance(raw, str):
        messages.append({"role": "user", "content": raw})
    elif isinstance(raw, (list, tuple)):
        messages.extend(items_as_messages(raw))
    else:
        return ResponsesRequest(None, "no_messages")
    doc: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    if isinstance(body.get("metadata"), dict):
        doc["metadata"] = body["metadata"]
    if body.get(SESSION_KEY) is not None:
        doc[SESSION_KEY] = body[SESSION_KEY]
    keep = body.get("store") is not False  # the API's default is to store the response
    if not (keep or previous or conversation):
        return ResponsesRequest(doc, None)
    return ResponsesRequest(doc, None, ResponseLink(previous or None, keep, conversation))


def _conversation_id(value: Any) -> str | None:
    """The id of a request's ``conversation`` (a string, or an object with ``id``), cleaned as a
    caller's conversation id (``clean_id``: it becomes the turn's, and is held per conversation):
    ``None`` when there is none, ``""`` when one is given but names no id."""
    if not value:
        return None
    cid = value if isinstance(value, str) else get(value, "id")
    return (clean_id(cid) or "") if isinstance(cid, str) else ""


def _finish_reason(response: Any, message: dict[str, Any] | None) -> str | None:
    status = get(response, "status")
    if status == "incomplete":
        reason = get(get(response, "incomplete_details"), "reason")
        return "length" if reason == "max_output_tokens" else "content_filter" if reason else None
    if status != "completed":
        return None
    return "tool_calls" if message is not None and message.get("tool_calls") else "stop"


def response_as_chat(response: Any) -> dict[str, Any] | None:
    """A Responses API response (JSON dict or SDK object) as a chat completion document:
    ``choices[0].message`` its reply, ``usage`` its token counts; ``None`` when it has no
    ``output`` list (not a response)."""
    output = get(response, "output")
    if not isinstance(output, (list, tuple)):
        return None
    # the assistant-side items only: other output items (an MCP tool listing, say) are not
    # the model's reply, and would split it in two
    messages = items_as_messages([i for i in output if _assistant_side(i)])
    message = messages[0] if messages else {"role": "assistant", "content": None}
    usage = get(response, "usage")
    doc: dict[str, Any] = {
        "id": get(response, "id"),
        "object": "chat.completion",
        "model": get(response, "model"),
        "choices": [{"index": 0, "message": message, "finish_reason": _finish_reason(response, message)}],
    }
    if usage is not None:
        doc["usage"] = {
            "prompt_tokens": get(usage, "input_tokens"),
            "completion_tokens": get(usage, "output_tokens"),
        }
    return doc


UNFINISHED = frozenset(("queued", "in_progress"))
"""Statuses of a response whose reply is still to come (``background=True``)."""


def unfinished(response: Any) -> bool:
    """A response still ``queued`` or ``in_progress``: a ``background=True`` call's first
    answer, whose reply comes later (``responses.retrieve``, a stream)."""
    status = get(response, "status")
    return isinstance(status, str) and status in UNFINISHED  # (an odd status may be unhashable)


class NoReply(NamedTuple):
    """A finished response that is no turn: it ``failed`` or was ``cancelled`` (whatever output
    it kept), or ended ``incomplete`` with no output text and no tool call (its tokens spent on
    reasoning, say). Recorded, it would be an empty reply failing every rule, charged to the
    model for what was the upstream's failure; the adapters count it instead
    (``Monitor.no_reply``). An ``incomplete`` response with output (``max_output_tokens`` cut
    it) is a turn: a real, truncated reply that a length rule should see."""

    status: str
    """One of ``types.NO_REPLY_STATUSES``."""


def no_reply(status: Any, message: dict[str, Any]) -> NoReply | None:
    """The :class:`NoReply` of a finished response in ``status`` whose reply read as chat is
    ``message``; ``None`` when it is a turn (any other status, even an odd one, reads as before)."""
    if status == "failed" or status == "cancelled":  # == only: an odd status may be unhashable
        return NoReply(status)
    if status == "incomplete" and said_nothing(message):
        return NoReply("incomplete")
    return None


def finished_as_chat(response: Any) -> dict[str, Any] | NoReply | None:
    """:func:`response_as_chat` of a (non-streamed) response that has finished, or its
    :class:`NoReply` when it finished without a reply; ``None`` for an :func:`unfinished` one
    (its reply is still to come) and for what is no response. Neither is a turn, but only a
    ``NoReply`` is final: a background call answered ``None`` stays parked."""
    if unfinished(response):
        return None
    doc = response_as_chat(response)
    if doc is None:
        return None
    return no_reply(get(response, "status"), doc["choices"][0]["message"]) or doc


class ResponsesStreamFolder(EventFolder):
    """Folds a Responses event stream (SDK events or decoded JSON) into a ``StreamOutcome``.

    An ``error`` event (or an exception the SDK raised for one, ``raised``) before any text
    makes the outcome no reply (``no_reply`` ``error``), as a Messages stream's does.

    The terminal event (``response.completed``, ``.incomplete``, ``.failed``) carries the
    whole response: the reply is then read from it as from a JSON response. Before it (a
    stream cut off), the reply is what the deltas built: text per content part, tool calls
    from their ``output_item`` events, and the outcome is not ``completed`` however the
    stream ended (its body may just end): a cut-off turn, not a finished reply to judge.
    Never raises; events it cannot read count in ``odd``. Bounded as ``ChunkFolder``: at most
    ``MAX_TOOL_CALLS`` output items are kept, and text and tool-call arguments past
    ``max_chars`` make the outcome ``too_large`` with nothing kept.

    Args:
        max_chars: characters of text and arguments kept before nothing more is
            (``too_large``), as ``ChunkFolder``.
    """

    def __init__(self, max_chars: int = MAX_REPLY_CHARS) -> None:
        super().__init__(max_chars)
        self._items: dict[int, Any] = {}
        self._texts: dict[tuple[int, int], Pieces] = {}
        self._final: Any = None
        self._status: str | None = None
        self._model: str | None = None
        self._id: str | None = None

    def _event(self, event: Any) -> None:
        kind = get(event, "type")
        if kind == "error" or (kind is None and get(event, "error") is not None):
            # the upstream's error: its ``error`` event, or an ``{"error": ...}`` payload (the
            # SDK raises that one: ``raised``); before any text, no reply (``failed_silent``)
            self.error = True
            return
        if not isinstance(kind, str):
            self.odd += 1
            return
        if kind in TERMINAL_EVENTS:
            response = get(event, "response")
            if not isinstance(get(response, "output"), (list, tuple)):
                self.odd += 1
                return
            status = get(response, "status")
            self._status = status if isinstance(status, str) else TERMINAL_EVENTS[kind]
            self._final, self.done = response, True
            return
        if kind in ("response.created", "response.in_progress"):
            response = get(event, "response")
            model, rid = get(response, "model"), get(response, "id")
            self._model = model if isinstance(model, str) else self._model
            self._id = rid if isinstance(rid, str) else self._id
        elif kind in ("response.output_text.delta", "response.refusal.delta"):
            self._keep(
                (int(get(event, "output_index")), int(get(event, "content_index"))), get(event, "delta")
            )
        elif kind in ("response.output_item.added", "response.output_item.done"):
            index, item = int(get(event, "output_index")), get(event, "item")
            if item is None or not _assistant_side(item) or not self._slot(index):
                return  # reasoning and other items are not part of the reply
            if get(item, "type") in (None, "message"):  # its text comes in deltas
                self._items.setdefault(index, {"type": "message", "role": "assistant"})
                return
            # a tool call (the done event has the arguments): kept as the fields the reply is
            # read from (``_call``), not whole (a built-in tool's action, padding), their text
            # counted against max_chars
            kept = {key: value for key in _CALL_FIELDS if type(value := get(item, key)) in _SCALARS}
            if self._count(sum(len(v) for v in kept.values() if type(v) is str)):
                self._items[index] = kept

    def _slot(self, index: int) -> bool:
        """Whether output item ``index`` may be kept (at most ``MAX_TOOL_CALLS`` items)."""
        if index in self._items or len(self._items) < MAX_TOOL_CALLS:
            return True
        self.odd += 1
        return False

    def _forget(self) -> None:
        self._texts.clear()
        self._items.clear()

    def _keep(self, key: tuple[int, int], delta: Any) -> None:
        if not isinstance(delta, str):
            self.odd += 1
            return
        if not self._slot(key[0]):
            return
        texts = self._texts.get(key)
        if texts is None and len(self._texts) >= MAX_TEXT_PARTS:
            self.odd += 1  # a new part past the bound: each would cost a list however short
            return
        if not self._count(len(delta)):
            return
        self._items.setdefault(key[0], {"type": "message", "role": "assistant"})
        if texts is None:
            texts = self._texts[key] = Pieces()
        texts.add(delta)

    def _partial(self) -> dict[str, Any]:
        """The response the deltas built so far."""
        output = []
        for index, item in sorted(self._items.items()):
            if get(item, "type") == "message":
                parts = sorted((c, "".join(t)) for (o, c), t in self._texts.items() if o == index)
                item = {"type": "message", "role": "assistant", "content": [_text_part(t) for _, t in parts]}
            output.append(item)
        return {"id": self._id, "model": self._model, "status": "in_progress", "output": output}

    def outcome(self, *, completed: bool) -> StreamOutcome:
        """The folded reply so far (the final response's, once the terminal event came)."""
        final = self._final
        doc = response_as_chat(final if final is not None else self._partial())
        assert doc is not None  # both have an output list (the terminal event is kept only then)
        (choice,) = doc["choices"]
        usage = doc.get("usage") or {}
        model, rid = doc.get("model"), doc.get("id")
        reply = choice["message"]
        if self.too_large and final is None:
            reply = {"role": "assistant", "content": None}
        nothing = no_reply(self._status, reply) if final is not None else None
        if nothing is None and self.failed_silent(reply):  # the upstream's error before any text
            nothing = NoReply("error")
        return StreamOutcome(
            reply=reply,
            deployment_ids=(),
            response_model=model if isinstance(model, str) else self._model,
            response_id=rid if isinstance(rid, str) else self._id,
            finish_reason=choice["finish_reason"],
            input_tokens=token_count(usage.get("prompt_tokens")),
            output_tokens=token_count(usage.get("completion_tokens")),
            # the terminal event: the API always ends so; a body that just ended before it is cut off
            completed=completed and self.done and self._status != "failed",
            chunks=self.chunks,
            odd=self.odd,
            too_large=self.too_large and final is None,
            no_reply=nothing.status if nothing is not None else None,
        )
