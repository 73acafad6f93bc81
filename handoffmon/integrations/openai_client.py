"""``wrap(openai.OpenAI | AsyncOpenAI)``: ``chat.completions.create`` and ``responses.create`` (and
``responses.stream``) monitored, the rest passed through."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from handoffmon.ingress import (
    RequestParser,
    StreamOutcome,
    describe_response,
    describe_stream,
    reply_message,
    served_by_headers,
)
from handoffmon.ingress.apis import RESPONSES, Api
from handoffmon.ingress.chunks import MAX_REPLY_CHARS, Folder
from handoffmon.integrations.responses_calls import api_messages, linked, snapshot
from handoffmon.integrations.streaming import AsyncStream, SyncStream, drain_finalized
from handoffmon.pipeline.monitor import Monitor
from handoffmon.pipeline.records import Capture, Deferred
from handoffmon.shadow.turns import ShadowOffer, ShadowSource

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.runtime import Runtime


def is_async_client(client: Any, sdk: str, async_class: str) -> bool:
    """The client is the async one of SDK ``sdk`` (``sdk.async_class``), or looks it (its
    class name starts with ``Async``: a duck-typed client, or the SDK is not installed)."""
    if type(client).__name__.startswith("Async"):
        return True
    try:
        module = importlib.import_module(sdk)
    except ImportError:  # pragma: no cover - duck-typed clients without the SDK
        return False
    return isinstance(client, getattr(module, async_class))


_KEPT_NOW = frozenset({"metadata", "extra_headers", "extra_body"})
"""Responses call arguments that keep the request read on the request path: the application's
own mappings, which it may change after the call."""


class _Pending(NamedTuple):
    """A call of another API whose request is read as chat later, off the request path: its
    arguments as of the call (the ``input``/``messages`` list copied), the request-path time
    and the API."""

    kwargs: dict[str, Any]
    begin_s: float
    api: Api


class SdkTurns:
    """Capture/finish plumbing shared by the sync and async ``create``."""

    def __init__(self, monitor: Monitor, shadow: Callable[[], ShadowSource | None] | None = None) -> None:
        self.monitor = monitor
        self.parser = RequestParser.from_config(monitor.config)
        self.shadow = shadow

    def offer(self, cap: Capture) -> ShadowOffer | None:
        """The turn's shadow offer when the runtime runs shadow continuation."""
        messages = cap.request.messages
        if self.shadow is None or not messages:
            return None
        source = self.shadow()
        return ShadowOffer(source, messages) if source is not None else None

    def begin(self, kwargs: Mapping[str, Any], api: Api | None = None) -> Capture | _Pending | None:
        """The turn's capture; ``None`` when it is not monitored (a Responses API call naming a
        stored history it cannot be attributed from). A call of another API (``api``) without
        metadata or extra headers/body is only copied here (``_Pending``): its request is read
        as chat when the reply is finished (ADR 0002)."""
        drain_finalized()  # streams dropped earlier are reported here, never from a finalizer
        try:
            if api is None:
                return self.monitor.capture(self.parser.openai_call(kwargs))
            if _KEPT_NOW.isdisjoint(kwargs):
                t0 = time.perf_counter()
                return _Pending(snapshot(kwargs), time.perf_counter() - t0, api)
            return self._api_capture(kwargs, api)
        except Exception as exc:  # the parser is total; this guards the plumbing
            self.monitor.errors.failed("integration", exc, "could not start a turn")
            return None

    def _api_capture(self, kwargs: Mapping[str, Any], api: Api) -> Capture | None:
        """A call of ``api`` read as chat messages, captured; ``None`` when not monitored."""
        read = api_messages(kwargs, api)
        if read is None:
            return None
        messages, link = read
        return self.monitor.capture(linked(self.parser.openai_call({**kwargs, "messages": messages}), link))

    def resolve(self, ctx: Capture | _Pending) -> Capture | None:
        """The capture of a turn begun as ``_Pending`` (its request read now), else ``ctx``."""
        if not isinstance(ctx, _Pending):
            return ctx
        cap = self._api_capture(ctx.kwargs, ctx.api)
        return None if cap is None else Capture(cap.request, ctx.begin_s)

    def _read_later(
        self, ctx: _Pending, response: Any, headers: Mapping[str, Any] | None, latency_s: float
    ) -> tuple[Capture, Any, Deferred, float] | None:
        """``Monitor.finish_later``'s build for a non-streamed ``_Pending`` call."""
        cap = self.resolve(ctx)
        doc = ctx.api.as_chat(response)
        reply = reply_message(doc)
        if cap is None or reply is None:
            return None
        outcome = Deferred(describe_response, (self.monitor.names, doc, served_by_headers(headers)))
        return cap, reply, outcome, latency_s

    def finish(
        self,
        cap: Capture | _Pending,
        response: Any,
        headers: Mapping[str, Any] | None,
        t0: float,
        api: Api | None = None,
    ) -> None:
        if isinstance(cap, _Pending):  # read on the attribution thread, in order with other turns
            self.monitor.finish_later(self._read_later, (cap, response, headers, time.perf_counter() - t0))
            return
        try:
            served = served_by_headers(headers)
            if api is not None:  # another API's response, read as a chat completion
                response = api.as_chat(response)
            self.monitor.finish(
                cap,
                reply_message(response),
                Deferred(describe_response, (self.monitor.names, response, served)),
                latency_s=time.perf_counter() - t0,
                shadow=None if api is not None else self.offer(cap),  # shadow continuation is for chat
            )
        except Exception as exc:
            self.monitor.errors.failed("integration", exc, "could not read a completion")

    def stream_done(
        self,
        ctx: Capture | _Pending,
        headers: Mapping[str, Any] | None,
        t0: float,
        out: StreamOutcome,
        offer: bool = True,
    ) -> None:
        try:
            if not self.monitor.stream_recordable(out):
                return
            cap = self.resolve(ctx)
            if cap is None:
                return
            served = served_by_headers(headers)
            self.monitor.finish(
                cap,
                out.reply,
                Deferred(describe_stream, (self.monitor.names, out, served)),
                latency_s=time.perf_counter() - t0,
                streamed=True,
                shadow=self.offer(cap) if offer else None,
            )
        except Exception as exc:
            self.monitor.errors.failed("integration", exc, "could not finish a streamed completion")


def _raw(completions: Any, name: str) -> Any:
    """``completions.with_raw_response.<name>`` when the SDK has it (gives us the headers)."""
    raw = getattr(completions, "with_raw_response", None)
    return getattr(raw, name, None)


def _folder(api: Api | None) -> Folder | None:
    return api.folder(MAX_REPLY_CHARS) if api is not None else None


class SyncCalls:
    """``chat.completions`` (or, with ``api``, the resource of that API: ``responses``, an
    Anthropic client's ``messages``) with ``create`` and ``parse`` (structured outputs)
    monitored."""

    def __init__(self, inner: Any, turns: SdkTurns, api: Api | None = None) -> None:
        self._inner = inner
        self._turns = turns
        self._api = api

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def stream(self, **kwargs: Any) -> Any:
        """``responses.stream``: the SDK's own helper, making its request through the
        monitored :meth:`create`."""
        return type(self._inner).stream(self, **kwargs)

    def create(self, **kwargs: Any) -> Any:
        """``create`` monitored; returns exactly what the SDK returns."""
        return self._call("create", kwargs)

    def parse(self, **kwargs: Any) -> Any:
        """``parse`` (structured outputs: the reply also parsed into the given type) monitored
        like ``create``: the SDK posts it without ``create``. Returns what the SDK returns."""
        return self._call("parse", kwargs)

    def _call(self, name: str, kwargs: dict[str, Any]) -> Any:
        api = self._api
        ctx = self._turns.begin(kwargs, api)
        t0 = time.perf_counter()
        raw_call = _raw(self._inner, name) if ctx is not None else None
        if raw_call is None:
            response, headers = getattr(self._inner, name)(**kwargs), None
        else:
            raw = raw_call(**kwargs)
            response, headers = raw.parse(), raw.headers
        if ctx is None:
            return response
        if kwargs.get("stream"):
            return SyncStream(
                response,
                lambda out, _i: self._turns.stream_done(ctx, headers, t0, out, api is None),
                _folder(api),
            )
        self._turns.finish(ctx, response, headers, t0, api)
        return response


class AsyncCalls:
    """Async twin of :class:`SyncCalls`."""

    def __init__(self, inner: Any, turns: SdkTurns, api: Api | None = None) -> None:
        self._inner = inner
        self._turns = turns
        self._api = api

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def stream(self, **kwargs: Any) -> Any:
        """``responses.stream``: the SDK's own helper, making its request through the
        monitored :meth:`create`."""
        return type(self._inner).stream(self, **kwargs)

    async def create(self, **kwargs: Any) -> Any:
        """``create`` monitored; returns exactly what the SDK returns."""
        return await self._call("create", kwargs)

    async def parse(self, **kwargs: Any) -> Any:
        """``parse`` (structured outputs) monitored like ``create``; returns what the SDK returns."""
        return await self._call("parse", kwargs)

    async def _call(self, name: str, kwargs: dict[str, Any]) -> Any:
        api = self._api
        ctx = self._turns.begin(kwargs, api)
        t0 = time.perf_counter()
        raw_call = _raw(self._inner, name) if ctx is not None else None
        if raw_call is None:
            response, headers = await getattr(self._inner, name)(**kwargs), None
        else:
            raw = await raw_call(**kwargs)
            response, headers = raw.parse(), raw.headers
            if inspect.isawaitable(response):  # the non-legacy raw response parses asynchronously
                response = await response
        if ctx is None:
            return response
        if kwargs.get("stream"):
            return AsyncStream(
                response,
                lambda out, _i: self._turns.stream_done(ctx, headers, t0, out, api is None),
                _folder(api),
            )
        self._turns.finish(ctx, response, headers, t0, api)
        return response


class _Chat:
    def __init__(self, inner: Any, completions: Any) -> None:
        self._inner = inner
        self.completions = completions

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class ClientWrapper:
    """What an SDK client's wrapper shows besides its monitored resources: the runtime, the
    monitor, the client, and every other attribute of the client.

    Args:
        client: the SDK client.
        monitor: the monitor that records turns.
        runtime: the runtime that owns ``monitor`` (``wrap`` passes it), if any.
    """

    def __init__(self, client: Any, monitor: Monitor, *, runtime: Runtime | None = None) -> None:
        self._client = client
        self._monitor = monitor
        self._runtime = runtime

    @property
    def runtime(self) -> Runtime | None:
        """The runtime owning the monitor (``None`` for a bare monitor)."""
        return self._runtime

    @property
    def monitor(self) -> Monitor:
        """The monitor recording this client's turns."""
        return self._monitor

    @property
    def client(self) -> Any:
        """The wrapped client."""
        return self._client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


class OpenAIClientWrapper(ClientWrapper):
    """An OpenAI-compatible client with handoffmon around ``chat.completions.create`` and
    ``responses.create`` (the ``stream`` helpers make their requests through them) and their
    ``parse`` helpers. A Responses API call continuing a stored response or a ``conversation``
    object is attributed from what handoffmon recorded of that history (ADR 0011).

    Authorship comes from LiteLLM response headers when the client talks to a LiteLLM
    Proxy (``x-litellm-model-id``, ``x-litellm-model-name``, attempted fallbacks and
    retries, read through ``with_raw_response``), else from the response's ``model``
    (``ingress.author``, the rule every adapter shares). When the runtime runs shadow
    continuation, the client also makes the shadow calls (``OpenAIShadow``; an async
    client's run on the event loop its turn was awaited on, ``AsyncOpenAIShadow``).

    Args:
        client: ``openai.OpenAI`` or ``openai.AsyncOpenAI`` (or a look-alike).
        monitor: the monitor that records turns.
        runtime: the runtime that owns ``monitor`` (``wrap`` passes it), if any.
    """

    def __init__(self, client: Any, monitor: Monitor, *, runtime: Runtime | None = None) -> None:
        super().__init__(client, monitor, runtime=runtime)
        is_async = is_async_client(client, "openai", "AsyncOpenAI")
        shadow = _shadow(client, monitor, runtime, is_async)
        turns = SdkTurns(monitor, shadow)
        kind = AsyncCalls if is_async else SyncCalls
        self.chat = _Chat(client.chat, kind(client.chat.completions, turns))
        inner = getattr(client, "responses", None)  # SDKs before the Responses API lack it
        if inner is not None:
            self.responses = kind(inner, turns, api=RESPONSES)


def _shadow(
    client: Any, monitor: Monitor, runtime: Runtime | None, is_async: bool
) -> Callable[[], ShadowSource | None] | None:
    """Per turn, the shadow source when the runtime runs shadow continuation (``None``: it does not)."""
    if runtime is None or runtime.shadow is None:
        return None
    from handoffmon.integrations.openai_shadow import AsyncOpenAIShadow, OpenAIShadow

    request_models = runtime.config.shadow.request_models
    if not is_async:
        source = OpenAIShadow(client, monitor.names, request_models)
        return lambda: source

    def on_this_loop() -> ShadowSource | None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # finished outside a loop (a stream's finalizer): no loop to call on
            return None
        return AsyncOpenAIShadow(client, monitor.names, loop, request_models)

    return on_this_loop
