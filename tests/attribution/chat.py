"""Test helper: play a conversation through an Attributor the way a monitored client would."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from handoffmon.attribution import Attributor, RecordedReply
from handoffmon.types import TurnContext


class Chat:
    """A client that resends its whole history each turn (attribute → record → persist)."""

    def __init__(
        self, attributor: Attributor, *, system: str | None = None, conversation_id: str | None = None
    ) -> None:
        self.attributor = attributor
        self.conversation_id = conversation_id
        self.history: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        self.contexts: list[TurnContext] = []
        self.recorded: list[RecordedReply] = []

    def _replace(self, history: list[dict[str, Any]]) -> Chat:
        """Start from a given history (e.g. a truncated one); returns self."""
        self.history = [dict(m) for m in history]
        return self

    def ask(self, user: str | list[dict[str, Any]]) -> TurnContext:
        """Append a user message and attribute the request (no reply yet)."""
        self.history.append({"role": "user", "content": user})
        ctx = self.attributor.attribute(self.history, conversation_id=self.conversation_id)
        self.contexts.append(ctx)
        return ctx

    def answer(self, reply: Any, authors: Sequence[str], *, persist: bool = True) -> RecordedReply:
        """Record the reply for the last context and append it to the history as sent back."""
        recorded = self.attributor.record(self.contexts[-1], reply, authors)
        if persist:
            self.attributor.persist(recorded)
        self.recorded.append(recorded)
        message = {"role": "assistant", "content": reply} if isinstance(reply, str) else dict(reply)
        self.history.append(message)
        return recorded

    def turn(self, user: str, reply: Any, *authors: str) -> TurnContext:
        """One full turn; returns the context the turn was attributed with."""
        ctx = self.ask(user)
        self.answer(reply, authors)
        return ctx
