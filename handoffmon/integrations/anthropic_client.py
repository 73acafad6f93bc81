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
    caller_headers,
    is_async_client,
)
from handoffmon.integrations.responses_calls import unmonitored_once


class _SyncMessages(SyncCalls):
    """``messages`` (or ``beta.messages``) with ``create`` monitored and ``stream`` made through it."""

    _manager = "MessageStreamManager"

    def stream(self, **kwargs: Any) -> Any:
        """``messages.stream``: the SDK's ``MessageStreamManager`` over the monitored
        ``create(stream=True)`` (the SDK's own helper posts without ``create``). With an
        ``output_format`` type (which only the helper turns into a schema) the SDK's helper
        itself, unmonitored (``_unmonitored``)."""
        if _has_output_format(kwargs):
            return self._inner.stream(**kwargs)
        import anthropic.lib.streaming as streaming

        manager = getattr(streaming, self._manager)
        return manager(lambda: self.create(stream=True, **kwargs), output_format=_not_given())


class _SyncBetaMessages(_SyncMessages):
    """``beta.messages``: the same, its stream the SDK's ``BetaMessageStreamManager``."""

    _manager = "BetaMessageStreamManager"


class _AsyncMessages(AsyncCalls):
    """Async twin of :class:`_SyncMessages`."""

    _manager = "AsyncMessageStreamManager"

    def stream(self, **kwargs: Any) -> Any:
        """``messages.stream``: the SDK's ``AsyncMessageStreamManager`` over the monitored
        ``create(stream=True)``; with an ``output_format`` type, the SDK's helper itself."""
        if _has_output_format(kwargs):
            return self._inner.stream(**kwargs)
        import anthropic.lib.streaming as streaming

        manager = getattr(streaming, self._manager)
        return manager(self.create(stream=True, **kwargs), output_format=_not_given())


class _AsyncBetaMessages(_AsyncMessages):
    """Async twin of :class:`_SyncBetaMessages`."""

    _manager = "BetaAsyncMessageStreamManager"


def _has_output_format(kwargs: dict[str, Any]) -> bool:
    """``stream(output_format=SomeType)``: ``create`` has no such argument (the SDK's stream helper
    converts the type into ``output_config`` itself), so the call is left to the helper, and
    passes through unmonitored; said once per process."""
    from anthropic import NotGiven, Omit

    fmt = kwargs.get("output_format")
    if fmt is None or isinstance(fmt, (NotGiven, Omit)):
        return False
    unmonitored_once("output_format")
    return True


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
        is_async = is_async_client(client, "anthropic", "AsyncAnthropic")
        kind, beta_kind = (
            (_AsyncMessages, _AsyncBetaMessages) if is_async else (_SyncMessages, _SyncBetaMessages)
        )
        headers = caller_headers(client, self._turns.parser.header_name)
        paths: Paths = {("messages",): kind(client.messages, self._turns, api=MESSAGES, headers=headers)}
        beta = getattr(getattr(client, "beta", None), "messages", None)  # betas: the same Messages API
        if beta is not None:
            paths["beta", "messages"] = beta_kind(beta, self._turns, api=MESSAGES, headers=headers)
        return paths
