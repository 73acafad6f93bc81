"""Message normalization: folded text, stable multimodal placeholders, canonical tool calls."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import xxhash

from handoffmon.types import Message

_MESSAGE_FIELDS = ("role", "content", "refusal", "tool_calls", "function_call", "name", "tool_call_id")
_BINARY_KEYS = ("url", "data", "file_data", "file_id", "image_url", "input_audio", "file")
_VOLATILE_KEYS = frozenset(("cache_control",))
"""Keys of a part that are not its content: Anthropic prompt caching puts ``cache_control`` on
the last block of the request and moves it to the new last block on the next turn."""


FOLD_BLOCK_CHARS = 1 << 16
"""Texts longer than this are folded a block at a time (``fold``)."""


def fold(text: str) -> str:
    """Collapse every run of whitespace to one space and strip both ends.

    ``" ".join(text.split())``, but a long text is folded ``FOLD_BLOCK_CHARS`` at a time: a
    split holds one ``str`` object (~60 bytes) per word, so a 10 MB reply of short words held
    ~210 MB at once (~20 MB by blocks). A word cut by a block boundary is joined back without
    a space (the boundary is whitespace only where either side of it is)."""
    if len(text) <= FOLD_BLOCK_CHARS:
        return " ".join(text.split())
    out: list[str] = []
    space = False  # whitespace since the last word kept
    for start in range(0, len(text), FOLD_BLOCK_CHARS):
        block = text[start : start + FOLD_BLOCK_CHARS]
        folded = " ".join(block.split())
        if folded:
            if out and (space or block[0].isspace()):
                out.append(" ")
            out.append(folded)
            space = block[-1].isspace()
        else:
            space = True
    return "".join(out)


UNREADABLE = "[unreadable]"
"""What ``_dumps`` gives for a value JSON cannot spell (nested past the recursion limit, or
holding itself): a stable text, so the message is still chained rather than the turn degraded."""


def _dumps(value: object, **spelling: Any) -> str:
    """``json.dumps`` with sorted keys (``default=str``), total: keys of mixed types (a Python
    caller's dict) in their own order, a value JSON cannot spell as ``UNREADABLE``."""
    try:
        return json.dumps(value, sort_keys=True, default=str, **spelling)
    except TypeError:  # keys that do not sort against each other
        try:
            return json.dumps(value, default=str, **spelling)
        except (TypeError, ValueError, RecursionError):
            return UNREADABLE
    except (ValueError, RecursionError):
        return UNREADABLE


def _short_hash(value: object) -> str:
    raw = value if isinstance(value, str) else _dumps(value)
    return f"{xxhash.xxh3_64_intdigest(raw.encode('utf-8', 'surrogatepass')):016x}"


def as_mapping(obj: Any) -> Mapping[str, Any]:
    """A mapping view of a dict, a pydantic model (OpenAI/LiteLLM objects) or a plain object."""
    if isinstance(obj, Mapping):
        return obj
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        try:
            dumped = dump()
        except Exception:  # an exotic model whose dump fails: read attributes instead
            dumped = None
        if isinstance(dumped, Mapping):
            return dumped
    return {k: getattr(obj, k) for k in _MESSAGE_FIELDS if getattr(obj, k, None) is not None}


def part_text(part: Any) -> str:
    """One content part as text: text parts folded, other parts as stable placeholders.

    A refusal part (``{"type": "refusal", "refusal": ...}``) is its text, as the message's
    ``refusal`` field is (``message_text``). An image part becomes ``[image_url:<xxh3 of its
    url or data>]``, audio ``[input_audio:<xxh3 of its data>]``; any other type
    ``[<type>:<xxh3 of the part>]``, less its ``cache_control``.
    """
    if isinstance(part, str):
        return fold(part)
    p = as_mapping(part)
    kind = str(p.get("type") or "text")
    if kind in ("text", "input_text", "output_text"):
        text = p.get("text")
        return fold(text) if isinstance(text, str) else fold(str(text or ""))
    if kind == "refusal" and isinstance(p.get("refusal"), str):
        return fold(p["refusal"])
    payload = next((p[k] for k in _BINARY_KEYS if p.get(k) is not None), None)
    if isinstance(payload, Mapping):
        inner = next((payload[k] for k in ("url", "data", "file_data", "file_id") if payload.get(k)), None)
        payload = inner if inner is not None else payload
    if payload is None:  # the whole part, less what a client moves between resends
        payload = {k: v for k, v in p.items() if k not in _VOLATILE_KEYS}
    return f"[{kind}:{_short_hash(payload)}]"


def content_text(content: Any) -> str:
    """Normalized text of a message's ``content`` (``None`` → ``""``).

    Parts are joined with single spaces, skipping empty ones, so a single text part
    normalizes exactly like the same text sent as a plain string.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return fold(content)
    if isinstance(content, (list, tuple)):
        return " ".join(t for t in map(part_text, content) if t)
    return part_text(content)


_TEXT_KINDS = frozenset(("text", "input_text", "output_text"))


def text_only(message: Any) -> dict[str, Any] | None:
    """A reply of several parts as an application that keeps only its text sends it back: the
    text parts concatenated with nothing between them, as the SDKs' own shortcuts do (the
    Responses API's ``output_text``; Anthropic text blocks joined, split mid-sentence by
    citations), tool calls kept. ``None`` when ``message`` is not a dict of two or more parts
    with some text (a plain reply resends as itself)."""
    if type(message) is not dict:
        return None
    content = message.get("content")
    if not isinstance(content, (list, tuple)) or len(content) < 2:
        return None
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif (
            isinstance(part, Mapping)
            and type(kind := part.get("type")) is str  # (an unhashable type: not a set lookup)
            and kind in _TEXT_KINDS
            and isinstance(part.get("text"), str)
        ):
            texts.append(part["text"])
    if not texts:
        return None
    out = {"role": "assistant", "content": "".join(texts)}
    if message.get("tool_calls"):
        out["tool_calls"] = message["tool_calls"]
    return out


def message_text(content: Any, refusal: Any) -> str:
    """Normalized text of a message: its ``content`` (``content_text``), then its ``refusal``
    (structured outputs: the model's refusal, content null) as one more part. A refusal sent
    back as the ``refusal`` field, as a refusal part or as the content is one text."""
    text = content_text(content)
    if not isinstance(refusal, str) or not (said := fold(refusal)):
        return text
    return f"{text} {said}" if text else said


def _canonical_arguments(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except (ValueError, RecursionError):
            return fold(arguments)
    return arguments


def tool_calls_text(tool_calls: Any, function_call: Any = None) -> str:
    """Canonical compact JSON of the tool calls (and a legacy ``function_call``), or ``""``.

    Each call becomes ``[id, name, arguments]`` with the arguments re-serialized with
    sorted keys when they are JSON, so whitespace and key order do not matter.
    """
    calls: list[Any] = []
    for call in (tool_calls or ()) if isinstance(tool_calls, (list, tuple)) else ():
        c = as_mapping(call)
        fn = as_mapping(c.get("function") or {})
        calls.append([c.get("id") or "", fn.get("name") or "", _canonical_arguments(fn.get("arguments"))])
    if function_call:
        fn = as_mapping(function_call)
        calls.append(["", fn.get("name") or "", _canonical_arguments(fn.get("arguments"))])
    if not calls:
        return ""
    return _dumps(calls, separators=(",", ":"), ensure_ascii=False)


def normalize_message(msg: Mapping[str, Any] | Any, *, default_role: str = "user") -> Message:
    """Normalize a chat message given as a dict or an OpenAI/LiteLLM/pydantic object.

    Never raises on odd input: unknown shapes are stringified.

    Args:
        msg: the message.
        default_role: role used when the message has none.
    """
    if isinstance(msg, Message):
        return msg
    if isinstance(msg, str):
        return Message(role=default_role, content=fold(msg))
    m = as_mapping(msg)
    role = role_of(m, default_role)
    name = m.get("name")
    call_id = m.get("tool_call_id")
    return Message(
        role=role,
        content=message_text(m.get("content"), m.get("refusal")),
        tool_calls=tool_calls_text(m.get("tool_calls"), m.get("function_call")),
        name=name if isinstance(name, str) else "",
        tool_call_id=call_id if isinstance(call_id, str) else "",
    )


def role_of(m: Mapping[str, Any], default: str = "user") -> str:
    """A message's role as a string (``default`` when missing or empty)."""
    role = m.get("role") or default
    return role if isinstance(role, str) else str(role)


def normalize_messages(messages: Sequence[Any]) -> list[Message]:
    """Normalize every message of a request history, in order."""
    return [normalize_message(m) for m in messages]


def extras_text(tool_calls: str, tool_call_id: str) -> str:
    """The non-content fields a digest folds in, as one string (``""`` for a plain message).

    A message's ``name`` is not among them: it is metadata the application adds (a participant
    or agent name; no model returns one), so a reply resent with a name is still the reply.
    (The empty field between the two is where a name once went: digests stay as they were.)"""
    if not (tool_calls or tool_call_id):
        return ""
    return f"{tool_calls}\x1e\x1e{tool_call_id}"
