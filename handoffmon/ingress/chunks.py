"""The stream-chunk folder: chat-completion chunks (SDK objects or JSON dicts) into one reply.

OpenAI streaming semantics: only choice 0 is folded (the one a chat client continues);
``delta.content`` pieces are concatenated, and ``delta.refusal`` pieces (structured outputs)
into ``refusal``; a tool call is keyed by ``index`` — its ``id``, ``type`` and
``function.name`` arrive once (a repeat replaces, never appends) while ``function.arguments``
pieces are appended. The folder is total: whatever a chunk holds,
``feed`` never raises; parts it cannot fold are skipped and counted in ``odd`` (the
adapter counts them as ``monitor_errors{stage="parse"}``).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

from handoffmon.ingress.fields import get, hidden_params

MAX_TOOL_CALLS = 128
"""Tool-call slots per reply; calls at further indexes are skipped (and counted odd)."""

MAX_REPLY_CHARS = 16 * 1024 * 1024
"""Characters of text and tool-call arguments one reply may fold (the default of ``serve``'s
``proxy.max_monitored_reply_bytes`` for JSON replies): past it the folder keeps nothing more and
the outcome is ``too_large``, so a stream of any length holds bounded memory."""


class StreamOutcome(NamedTuple):
    """A finished (or cut-off) stream.

    Attributes:
        reply: the assistant message as a client would resend it (``role``, ``content`` —
            ``None`` when no text arrived — and ``tool_calls``), for recording and checking.
        deployment_ids: deployments that produced content, in order, consecutive duplicates
            merged (two for a mid-stream fallback continuation; LiteLLM chunks only).
        response_model: last model string a chunk reported.
        response_id: the completion id the chunks carried.
        finish_reason: last finish reason seen.
        input_tokens: usage from the final chunk, when sent.
        output_tokens: usage from the final chunk, when sent.
        completed: the stream ended normally (False = error or the consumer stopped early).
        chunks: chunks seen.
        odd: chunks (or parts of them) that could not be folded and were skipped.
        too_large: the reply's text and arguments passed the folder's ``max_chars``: nothing
            was kept (``reply`` has no text), and the adapter does not record the turn.
    """

    reply: dict[str, Any]
    deployment_ids: tuple[str, ...]
    response_model: str | None
    response_id: str | None
    finish_reason: str | None
    input_tokens: int | None
    output_tokens: int | None
    completed: bool
    chunks: int
    odd: int
    too_large: bool = False


class Folder(Protocol):
    """Folds a stream's events into one reply: :class:`ChunkFolder` for chat-completion chunks,
    ``ingress.responses.ResponsesStreamFolder`` for Responses API events."""

    def feed(self, chunk: Any) -> None:
        """Take one event; never raises."""

    def outcome(self, *, completed: bool) -> StreamOutcome:
        """The folded reply so far."""


def parts_content(parts: list[Any]) -> Any:
    """Chat ``content`` of a message read from another API's parts: one text part as a plain
    string (the two normalize alike), else the parts; ``None`` for none."""
    if not parts:
        return None
    if len(parts) == 1 and type(parts[0]) is dict and parts[0].get("type") == "text":
        return parts[0]["text"]
    return parts


class EventFolder:
    """What the folders of typed event streams (the Responses and Messages APIs) share: the
    event and odd counts, a ``feed`` that never raises, and the cap on the reply's size.

    Args:
        max_chars: characters of text and arguments kept before nothing more is
            (``too_large``), as ``ChunkFolder``.
    """

    def __init__(self, max_chars: int = MAX_REPLY_CHARS) -> None:
        self._max_chars = max_chars
        self._chars = 0
        self.done = False
        self.chunks = 0
        self.odd = 0
        self.too_large = False

    def feed(self, event: Any) -> None:
        """Take one event; never raises."""
        self.chunks += 1
        try:
            self._event(event)
        except Exception:
            self.odd += 1

    def _event(self, event: Any) -> None:
        raise NotImplementedError

    def _forget(self) -> None:
        """Drop everything kept of the reply (it passed ``max_chars``)."""
        raise NotImplementedError

    def _count(self, chars: int) -> bool:
        """Add ``chars`` to the reply's size; past ``max_chars`` keep nothing (``too_large``)."""
        if self.too_large:
            return False
        self._chars += chars
        if self._chars > self._max_chars:
            self.too_large = True
            self._forget()
            return False
        return True


class _Call:
    __slots__ = ("args", "id", "name", "type")

    def __init__(self) -> None:
        self.id = ""
        self.type = "function"
        self.name = ""
        self.args: list[str] = []


_NOT_OBJECTS = (str, bytes, int, float, list, tuple)
"""Values that cannot be a chunk, choice, delta, tool call or function object."""


def _is_index(value: object) -> bool:
    return type(value) is int and value >= 0


def _text(obj: Any, name: str) -> str | None:
    """``obj.name`` when it is a non-empty string."""
    value = get(obj, name)
    return value if type(value) is str and value else None


class ChunkFolder:
    """Folds chat-completion chunks into one reply; see the module docstring for the rules."""

    __slots__ = (
        "_calls",
        "_chars",
        "_finish",
        "_id",
        "_ids",
        "_in",
        "_max_chars",
        "_model",
        "_out",
        "_refusal",
        "_role",
        "_text",
        "chunks",
        "odd",
        "too_large",
    )

    def __init__(self, max_chars: int = MAX_REPLY_CHARS) -> None:
        self._max_chars = max_chars
        self._chars = 0
        self.too_large = False
        self._text: list[str] = []
        self._refusal: list[str] = []
        self._calls: dict[int, _Call] = {}
        self._ids: list[str] = []
        self._role = "assistant"
        self._model: str | None = None
        self._id: str | None = None
        self._finish: str | None = None
        self._in: int | None = None
        self._out: int | None = None
        self.chunks = 0
        self.odd = 0

    def feed(self, chunk: Any) -> None:
        """Take one chunk. Never raises; what cannot be folded is skipped and counted in ``odd``."""
        self.chunks += 1
        try:
            if not self._chunk(chunk):
                self.odd += 1
        except Exception:  # a shape nobody anticipated: skip the chunk, keep the stream
            self.odd += 1

    def _chunk(self, chunk: Any) -> bool:
        """Fold one chunk; False when some part of it was skipped."""
        if chunk is None or isinstance(chunk, _NOT_OBJECTS):
            return False
        self._model = _text(chunk, "model") or self._model
        self._id = _text(chunk, "id") or self._id
        ok = self._usage(get(chunk, "usage"))
        choices = get(chunk, "choices")
        if choices is None:
            return ok
        if not isinstance(choices, (list, tuple)):
            return False
        for choice in choices:
            if choice is None or isinstance(choice, _NOT_OBJECTS):
                ok = False
                continue
            index = get(choice, "index")
            if index is not None and not _is_index(index):
                ok = False
            elif not index:  # choice 0 (or a provider that leaves the index out)
                ok = self._choice(choice, chunk) and ok
        return ok

    def _usage(self, usage: Any) -> bool:
        if usage is None:
            return True
        pt, ct = get(usage, "prompt_tokens"), get(usage, "completion_tokens")
        if type(pt) is int:
            self._in = pt
        if type(ct) is int:
            self._out = ct
        return True

    def _choice(self, choice: Any, chunk: Any) -> bool:
        self._finish = _text(choice, "finish_reason") or self._finish
        delta = get(choice, "delta")
        if delta is None:
            return True
        if isinstance(delta, _NOT_OBJECTS):
            return False
        self._role = _text(delta, "role") or self._role
        ok, produced = self._content(get(delta, "content"))
        refusal = get(delta, "refusal")
        if type(refusal) is str and refusal:  # structured outputs: the refusal, content null
            self._keep(self._refusal, refusal)
            produced = True
        elif refusal is not None and type(refusal) is not str:
            ok = False
        calls = get(delta, "tool_calls")
        if calls is not None:
            if isinstance(calls, (list, tuple)):
                for call in calls:
                    folded = self._call(call)
                    ok = ok and folded
                    produced = produced or folded
            else:
                ok = False
        if produced:
            dep = hidden_params(chunk).get("model_id")
            if type(dep) is str and dep and (not self._ids or self._ids[-1] != dep):
                self._ids.append(dep)
        return ok

    def _content(self, content: Any) -> tuple[bool, bool]:
        """(folded cleanly, produced text)."""
        if content is None:
            return True, False
        if type(content) is str:
            if content:
                self._keep(self._text, content)
            return True, bool(content)
        if isinstance(content, (list, tuple)):  # content parts
            ok, produced = True, False
            for part in content:
                if type(part) is str:
                    text: Any = part
                elif get(part, "type") == "text":
                    text = get(part, "text")
                else:
                    continue  # non-text parts carry no reply text
                if type(text) is str:
                    if text:
                        self._keep(self._text, text)
                        produced = True
                else:
                    ok = False
            return ok, produced
        return False, False

    def _call(self, call: Any) -> bool:
        """Fold one tool-call delta; False when it cannot be placed (no usable ``index``)."""
        if call is None or isinstance(call, _NOT_OBJECTS):
            return False
        index = get(call, "index")
        if not _is_index(index):
            return False
        slot = self._calls.get(index)
        if slot is None:
            if len(self._calls) >= MAX_TOOL_CALLS:
                return False
            slot = self._calls[index] = _Call()
        slot.id = _text(call, "id") or slot.id
        slot.type = _text(call, "type") or slot.type
        fn = get(call, "function")
        if fn is None:
            return True
        if isinstance(fn, _NOT_OBJECTS):
            return False
        slot.name = _text(fn, "name") or slot.name  # arrives once; a repeat replaces, never appends
        args = get(fn, "arguments")
        if type(args) is str:
            self._keep(slot.args, args)
        elif args is not None:
            return False
        return True

    def _keep(self, pieces: list[str], piece: str) -> None:
        """Append ``piece`` while the reply stays within ``max_chars``; past it, drop all text
        and arguments kept so far and keep nothing more (``too_large``)."""
        if self.too_large:
            return
        self._chars += len(piece)
        if self._chars > self._max_chars:
            self.too_large = True
            self._text.clear()
            self._refusal.clear()
            for call in self._calls.values():
                call.args.clear()
            return
        pieces.append(piece)

    def outcome(self, *, completed: bool) -> StreamOutcome:
        """The folded reply so far."""
        reply: dict[str, Any] = {"role": self._role, "content": "".join(self._text) if self._text else None}
        if self._refusal:
            reply["refusal"] = "".join(self._refusal)
        if self._calls:
            reply["tool_calls"] = [
                {
                    "id": c.id,
                    "type": c.type,
                    "function": {"name": c.name, "arguments": "".join(c.args)},
                }
                for _, c in sorted(self._calls.items())
            ]
        return StreamOutcome(
            reply=reply,
            deployment_ids=tuple(self._ids),
            response_model=self._model,
            response_id=self._id,
            finish_reason=self._finish,
            input_tokens=self._in,
            output_tokens=self._out,
            completed=completed,
            chunks=self.chunks,
            odd=self.odd,
            too_large=self.too_large,
        )
