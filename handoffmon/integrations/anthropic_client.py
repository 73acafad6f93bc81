"""``wrap(anthropic.Anthropic | AsyncAnthropic)``: ``messages.create`` (streamed or not) and the
``messages.stream`` helper monitored, read as chat (ADR 0012); the rest passed through.

The same plumbing as the OpenAI client's (``openai_client.SdkTurns``): the request is read on
the attribution thread unless it carries metadata or extra headers/body, LiteLLM Proxy's
authorship headers are read through ``with_raw_response`` when it answers, else the message's
``model`` names the author.
"""

from __future__ import annotations

from typing import Any

from handoffmon.ingress.apis import MESSAGES
from handoffmon.integrations.openai_client import (
    AsyncCalls,
    ClientWrapper,
    Paths,
    SyncCalls,
    is_async_client,
)


class _SyncMessages(SyncCalls):
    """``messages`` with ``create`` monitored and ``stream`` made through it."""

    def stream(self, **kwargs: Any) -> Any:
        """``messages.stream``: the SDK's ``MessageStreamManager`` over the monitored
        ``create(stream=True)`` (the SDK's own helper posts without ``create``)."""
        from anthropic.lib.streaming import MessageStreamManager

        return MessageStreamManager(lambda: self.create(stream=True, **kwargs), output_format=_not_given())


class _AsyncMessages(AsyncCalls):
    """Async twin of :class:`_SyncMessages`."""

    def stream(self, **kwargs: Any) -> Any:
        """``messages.stream``: the SDK's ``AsyncMessageStreamManager`` over the monitored
        ``create(stream=True)``."""
        from anthropic.lib.streaming import AsyncMessageStreamManager

        return AsyncMessageStreamManager(self.create(stream=True, **kwargs), output_format=_not_given())


def _not_given() -> Any:
    from anthropic import NOT_GIVEN

    return NOT_GIVEN


class AnthropicClientWrapper(ClientWrapper):
    """An Anthropic client with handoffmon around ``messages.create`` (``messages.stream``
    makes its request through it), also when called through ``with_raw_response`` or
    ``with_streaming_response`` or on a ``with_options`` copy (``sdk_views``).

    Args:
        client: ``anthropic.Anthropic`` or ``anthropic.AsyncAnthropic`` (or a look-alike).
        monitor: the monitor that records turns.
        runtime: the runtime that owns ``monitor`` (``wrap`` passes it), if any.
    """

    def _resources(self) -> Paths:
        client = self._client
        kind = _AsyncMessages if is_async_client(client, "anthropic", "AsyncAnthropic") else _SyncMessages
        return {("messages",): kind(client.messages, self._turns, api=MESSAGES)}
