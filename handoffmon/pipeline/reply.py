"""Plain text of replies and user messages in the shapes applications pass (str, dict, SDK objects)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _field(obj: Any, name: str) -> Any:
    if type(obj) is dict:  # the usual message shape, without the ABC check
        return obj.get(name)
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def content_text(content: Any) -> str:
    """Text of a message ``content``: a string, ``None``, or a list of parts (text parts joined)."""
    if type(content) is str:
        return content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif _field(part, "type") == "text":
                texts.append(str(_field(part, "text") or ""))
        return "\n".join(texts)
    return str(content)


def reply_text(reply: Any) -> str:
    """Text the checkers see for an assistant reply (a str, a message dict or an SDK message):
    its content, or, when that has no text, its ``refusal`` (structured outputs put a refusal
    there, with ``content`` null: it is what the user is shown)."""
    if isinstance(reply, str):
        return reply
    if reply is None:
        return ""
    text = content_text(_field(reply, "content"))
    if text:
        return text
    refusal = _field(reply, "refusal")
    return refusal if type(refusal) is str else ""


def calls_tools_only(reply: Any, text: str) -> bool:
    """Whether an assistant reply whose checkable text is ``text`` only calls tools: no text
    (``None``, empty or blank content) and a non-empty ``tool_calls`` (or legacy
    ``function_call``). Such a turn has nothing for the rules to check."""
    if text and not text.isspace():
        return False
    if reply is None or isinstance(reply, str):
        return False
    return bool(_field(reply, "tool_calls") or _field(reply, "function_call"))


def last_user_text(messages: Sequence[Any]) -> str:
    """Text of the last ``user`` message of a request ("" when there is none)."""
    for msg in reversed(messages):
        if type(msg) is dict:  # the usual shape, inline
            if msg.get("role") == "user":
                return content_text(msg.get("content"))
        elif _field(msg, "role") == "user":
            return content_text(_field(msg, "content"))
    return ""


def count_assistant(messages: Sequence[Any]) -> int:
    """Number of assistant messages in a request history."""
    return sum(1 for msg in messages if _field(msg, "role") == "assistant")
