"""The stream-chunk folder: chat-completion chunks (SDK objects or JSON dicts) into one reply.

OpenAI streaming semantics: each choice is folded by its ``index`` (choice 0, the one the call
counts as and the rules check, plus up to ``MAX_ALTERNATIVES`` others of an ``n > 1`` request,
so whichever choice the application continues with is attributable); ``delta.content`` pieces
are concatenated, and ``delta.refusal`` pieces (structured outputs)
into ``refusal``; a tool call is keyed by ``index`` — its ``id``, ``type`` and
``function.name`` arrive once (a repeat replaces, never appends) while ``function.arguments``
pieces are appended. The folder is total: whatever a chunk holds,
``feed`` never raises; parts it cannot fold are skipped and counted in ``odd`` (the
adapter counts them as ``monitor_errors{stage="parse"}``).

A stream that raises instead of giving its next event is told to its folder (``raised``), so
the verdict on how it ended is the folder's, the same in every adapter: an event stream (the
Responses and Messages APIs) that the upstream ended with an error before any text is no
reply (``StreamOutcome.no_reply`` ``error``: no turn, counted), and so is a chat stream
ended so (an ``{"error": ...}`` chunk, or the exception an SDK or LiteLLM raised for one); a
stream that said something, or one that broke off otherwise (a dropped connection), is cut off.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

from handoffmon.ingress.fields import get, hidden_params, token_count

MAX_TOOL_CALLS = 128
"""Tool-call slots per reply; calls at further indexes are skipped (and counted odd)."""

MAX_ALTERNATIVES = 16
"""Other choices of an ``n > 1`` completion recorded per turn (OpenAI allows up to 128), streamed
or not: each costs one stored fingerprint, so the bound keeps a hostile ``n`` from multiplying
state. A stream's choices at further indexes are skipped (not counted odd: the request asked
for them)."""

MAX_DEPLOYMENTS = 16
"""Deployments a stream's reply is credited to (``StreamOutcome.deployment_ids``): a mid-stream
fallback makes two. Past this many switches the last entry is replaced, so the first ones and
the one that finished the reply are kept and a stream whose chunks alternate deployments
cannot grow the turn's authors (each a stored name) with its length."""

MAX_REPLY_CHARS = 16 * 1024 * 1024
"""Characters of text and tool-call arguments one reply (all its choices) may fold (the default of ``serve``'s
``proxy.max_monitored_reply_bytes`` for JSON replies): past it the folder keeps nothing more and
the outcome is ``too_large``, so a stream of any length holds bounded memory."""


class Pieces(list[str]):
    """A streamed text's pieces, joined 64 at a time as they come.

    A stream of tiny deltas (one or two characters each) would otherwise hold one ``str``
    object (~50 bytes) per delta: 15-35x the characters ``max_chars`` counts. Joined in
    blocks, a folded text costs about its characters plus one object per 64 deltas; each
    character is copied twice at most. ``"".join(pieces)`` reads it whole, as a plain list.
    """

    __slots__ = ("tail",)

    BLOCK = 64

    def __init__(self) -> None:
        super().__init__()
        self.tail = 0
        """Pieces appended since the last join."""

    def add(self, piece: str) -> None:
        """Append ``piece``; every ``BLOCK`` pieces become one."""
        self.append(piece)
        self.tail += 1
        if self.tail >= self.BLOCK:
            self[-self.BLOCK :] = ["".join(self[-self.BLOCK :])]
            self.tail = 0

    def clear(self) -> None:
        super().clear()
        self.tail = 0


class StreamOutcome(NamedTuple):
    """A finished (or cut-off) stream.

    Attributes:
        reply: the assistant message as a client would resend it (``role``, ``content`` —
            ``None`` when no text arrived — and ``tool_calls``), for recording and checking.
        deployment_ids: deployments that produced content, in order, consecutive duplicates
            merged (two for a mid-stream fallback continuation; LiteLLM chunks only; at most
            ``MAX_DEPLOYMENTS``, the last the one that produced the latest content).
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
        alternatives: the assistant messages of choices 1… of an ``n > 1`` stream, by index
            (the first ``MAX_ALTERNATIVES``), as ``reply``.
        no_reply: the stream's final response finished without a reply (Responses API
            ``failed``, ``cancelled``, ``incomplete`` with no output:
            ``ingress.responses.NoReply``): its status; the adapter records no turn
            (``Monitor.stream_recordable`` counts it).
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
    alternatives: tuple[dict[str, Any], ...] = ()
    no_reply: str | None = None


class Folder(Protocol):
    """Folds a stream's events into one reply: :class:`ChunkFolder` for chat-completion chunks,
    ``ingress.responses.ResponsesStreamFolder`` for Responses API events."""

    def feed(self, chunk: Any) -> None:
        """Take one event; never raises."""

    def raised(self, exc: BaseException) -> None:
        """The stream raised ``exc`` instead of giving its next event; never raises."""

    def outcome(self, *, completed: bool) -> StreamOutcome:
        """The folded reply so far."""


def upstream_error(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a stream, is an error the upstream sent in it: the SDK's (or
    LiteLLM's) exception for an ``error`` event, or LiteLLM's ``InternalServerError`` at a
    Responses API ``response.failed``. Such an exception carries the upstream's status code or
    error body; a dropped connection or a timeout (``APIConnectionError`` and its subclasses,
    in the OpenAI and Anthropic SDKs and LiteLLM, which give one a status code) does not count,
    nor does anything else the iteration raised."""
    if any(c.__name__ == "APIConnectionError" for c in type(exc).__mro__):
        return False
    return type(getattr(exc, "status_code", None)) is int or getattr(exc, "body", None) is not None


def said_nothing(message: dict[str, Any]) -> bool:
    """A reply (read as chat) with no tool call, no refusal and no content but empty text parts."""
    if message.get("tool_calls") or message.get("refusal"):
        return False
    content = message.get("content")
    if isinstance(content, list):
        return all(type(p) is dict and p.get("type") == "text" and not p.get("text") for p in content)
    return not content


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
    event and odd counts, a ``feed`` that never raises, the cap on the reply's size, and the
    upstream's error ending the stream (``error``: an ``error`` event, or an exception the
    stream raised for one, :func:`upstream_error`).

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
        self.error = False
        """The upstream ended the stream with an error (its ``error`` event, or the exception
        an SDK or LiteLLM raised for it)."""

    def feed(self, event: Any) -> None:
        """Take one event; never raises."""
        self.chunks += 1
        try:
            self._event(event)
        except Exception:
            self.odd += 1

    def raised(self, exc: BaseException) -> None:
        """The stream raised ``exc``: the upstream's error (:func:`upstream_error`) ends it as
        an ``error`` event would; anything else (a dropped connection) leaves it cut off."""
        try:
            self.error = self.error or upstream_error(exc)
        except Exception:  # an exception that cannot even be looked at: not the upstream's
            self.odd += 1

    def failed_silent(self, reply: dict[str, Any]) -> bool:
        """The upstream's error ended the stream before ``reply`` said anything: no reply
        (``no_reply`` ``error``), as long as the reply was kept (not ``too_large``)."""
        return self.error and not self.too_large and said_nothing(reply)

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
        self.args = Pieces()


class _Reply:
    """One choice's message as it is folded."""

    __slots__ = ("calls", "refusal", "role", "text")

    def __init__(self) -> None:
        self.text = Pieces()
        self.refusal = Pieces()
        self.calls: dict[int, _Call] = {}
        self.role = "assistant"

    def forget(self) -> None:
        self.text.clear()
        self.refusal.clear()
        for call in self.calls.values():
            call.args.clear()

    def message(self) -> dict[str, Any]:
        reply: dict[str, Any] = {"role": self.role, "content": "".join(self.text) if self.text else None}
        if self.refusal:
            reply["refusal"] = "".join(self.refusal)
        if self.calls:
            reply["tool_calls"] = [
                {
                    "id": c.id,
                    "type": c.type,
                    "function": {"name": c.name, "arguments": "".join(c.args)},
                }
                for _, c in sorted(self.calls.items())
            ]
        return reply


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
        "_chars",
        "_finish",
        "_first",
        "_id",
        "_ids",
        "_in",
        "_max_chars",
        "_model",
        "_others",
        "_out",
        "chunks",
        "error",
        "odd",
        "too_large",
    )

    def __init__(self, max_chars: int = MAX_REPLY_CHARS) -> None:
        self._max_chars = max_chars
        self._chars = 0
        self.too_large = False
        self._first = _Reply()
        self._others: dict[int, _Reply] = {}
        self._ids: list[str] = []
        self._model: str | None = None
        self._id: str | None = None
        self._finish: str | None = None
        self._in: int | None = None
        self._out: int | None = None
        self.chunks = 0
        self.odd = 0
        self.error = False
        """The upstream ended the stream with an error (an ``{"error": ...}`` chunk, or the
        exception an SDK or LiteLLM raised for it), as ``EventFolder.error``."""

    def feed(self, chunk: Any) -> None:
        """Take one chunk. Never raises; what cannot be folded is skipped and counted in ``odd``."""
        self.chunks += 1
        try:
            if not self._chunk(chunk):
                self.odd += 1
        except Exception:  # a shape nobody anticipated: skip the chunk, keep the stream
            self.odd += 1

    raised = EventFolder.raised
    """The stream raised ``exc``: the upstream's error (:func:`upstream_error`) ends it as an
    ``{"error": ...}`` chunk would; anything else (a dropped connection) leaves it cut off (the
    turn keeps the text so far; ``completed`` is the adapter's False)."""

    def _chunk(self, chunk: Any) -> bool:
        """Fold one chunk; False when some part of it was skipped."""
        if chunk is None or isinstance(chunk, _NOT_OBJECTS):
            return False
        self._model = _text(chunk, "model") or self._model
        self._id = _text(chunk, "id") or self._id
        ok = self._usage(get(chunk, "usage"))
        choices = get(chunk, "choices")
        if choices is None:
            if get(chunk, "error") is not None:  # the upstream's error (the SDK raises it: raised)
                self.error = True
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
            elif index <= MAX_ALTERNATIVES:  # another choice of an n > 1 request
                reply = self._others.get(index)
                if reply is None:
                    reply = self._others[index] = _Reply()
                ok = self._delta(get(choice, "delta"), reply)[0] and ok
        return ok

    def _usage(self, usage: Any) -> bool:
        if usage is None:
            return True
        pt, ct = token_count(get(usage, "prompt_tokens")), token_count(get(usage, "completion_tokens"))
        if pt is not None:
            self._in = pt
        if ct is not None:
            self._out = ct
        return True

    def _choice(self, choice: Any, chunk: Any) -> bool:
        self._finish = _text(choice, "finish_reason") or self._finish
        ok, produced = self._delta(get(choice, "delta"), self._first)
        if produced:
            dep = hidden_params(chunk).get("model_id")
            ids = self._ids
            if type(dep) is str and dep and (not ids or ids[-1] != dep):
                if len(ids) >= MAX_DEPLOYMENTS:  # keep the first ones and the latest
                    ids.pop()
                    if ids[-1] == dep:
                        return ok
                ids.append(dep)
        return ok

    def _delta(self, delta: Any, reply: _Reply) -> tuple[bool, bool]:
        """Fold one choice's delta into ``reply``: (folded cleanly, produced content)."""
        if delta is None:
            return True, False
        if isinstance(delta, _NOT_OBJECTS):
            return False, False
        reply.role = _text(delta, "role") or reply.role
        ok, produced = self._content(get(delta, "content"), reply.text)
        refusal = get(delta, "refusal")
        if type(refusal) is str and refusal:  # structured outputs: the refusal, content null
            self._keep(reply.refusal, refusal)
            produced = True
        elif refusal is not None and type(refusal) is not str:
            ok = False
        calls = get(delta, "tool_calls")
        if calls is not None:
            if isinstance(calls, (list, tuple)):
                for call in calls:
                    folded = self._call(call, reply.calls)
                    ok = ok and folded
                    produced = produced or folded
            else:
                ok = False
        return ok, produced

    def _content(self, content: Any, text: Pieces) -> tuple[bool, bool]:
        """(folded cleanly, produced text)."""
        if content is None:
            return True, False
        if type(content) is str:
            if content:
                self._keep(text, content)
            return True, bool(content)
        if isinstance(content, (list, tuple)):  # content parts
            ok, produced = True, False
            for part in content:
                if type(part) is str:
                    piece: Any = part
                elif get(part, "type") == "text":
                    piece = get(part, "text")
                else:
                    continue  # non-text parts carry no reply text
                if type(piece) is str:
                    if piece:
                        self._keep(text, piece)
                        produced = True
                else:
                    ok = False
            return ok, produced
        return False, False

    def _call(self, call: Any, calls: dict[int, _Call]) -> bool:
        """Fold one tool-call delta; False when it cannot be placed (no usable ``index``)."""
        if call is None or isinstance(call, _NOT_OBJECTS):
            return False
        index = get(call, "index")
        if not _is_index(index):
            return False
        slot = calls.get(index)
        if slot is None:
            if len(calls) >= MAX_TOOL_CALLS:
                return False
            slot = calls[index] = _Call()
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

    def _keep(self, pieces: Pieces, piece: str) -> None:
        """Append ``piece`` while the reply (all its choices) stays within ``max_chars``; past
        it, drop all text and arguments kept so far and keep nothing more (``too_large``)."""
        if self.too_large:
            return
        self._chars += len(piece)
        if self._chars > self._max_chars:
            self.too_large = True
            self._first.forget()
            for other in self._others.values():
                other.forget()
            return
        pieces.add(piece)

    def outcome(self, *, completed: bool) -> StreamOutcome:
        """The folded reply so far: no reply (``no_reply`` ``error``) when the upstream's
        error ended the stream before any choice said anything (and the reply was kept)."""
        reply = self._first.message()
        others = tuple(self._others[i].message() for i in sorted(self._others))
        silent = self.error and not self.too_large and all(map(said_nothing, (reply, *others)))
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
            alternatives=others,
            no_reply="error" if silent else None,
        )
