"""``wrap(openai.OpenAI | AsyncOpenAI)``: ``chat.completions.create`` and ``responses.create`` (and
``responses.stream``) monitored, the rest passed through."""

from __future__ import annotations

import asyncio
import copy
import importlib
import inspect
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from handoffmon.ingress import (
    RequestParser,
    StreamOutcome,
    describe_response,
    describe_stream,
    served_by_headers,
)
from handoffmon.ingress.apis import RESPONSES, Api
from handoffmon.ingress.chunks import MAX_REPLY_CHARS, Folder
from handoffmon.ingress.conversation import CALLER_HEADERS
from handoffmon.ingress.fields import get
from handoffmon.ingress.responses import unfinished
from handoffmon.integrations.background import history_bytes
from handoffmon.integrations.forwarding import del_forwarded, set_forwarded
from handoffmon.integrations.held import weigh, weigh_call
from handoffmon.integrations.responses_calls import api_messages, linked, readable_reply, snapshot
from handoffmon.integrations.sdk_views import (
    Forwarding,
    RawCalls,
    StreamingCalls,
    View,
    parsed_response,
    stream_helper,
)
from handoffmon.integrations.streaming import AsyncStream, SyncStream, drain_finalized
from handoffmon.pipeline.monitor import Monitor
from handoffmon.pipeline.records import Built, Capture, Deferred
from handoffmon.runtime.background import Background
from handoffmon.shadow.turns import ShadowOffer, ShadowSource, offer_of

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


class _Chat(NamedTuple):
    """A chat completion's capture and its keyword arguments (``_SentParams``), which its shadow
    call repeats the generation parameters of; what ``_Calls._begin`` gives while shadow
    continuation may run (a plain ``Capture`` otherwise)."""

    cap: Capture
    kwargs: Mapping[str, Any]


class _SentParams(Mapping[str, Any]):
    """A chat call's keyword arguments (the wrapper's own dict, which nothing changes after the
    call) as its shadow call reads them, on the shadow thread (``turns.shadow_params``): a
    ``response_format`` type (``parse``'s structured outputs, which ``create`` refuses) as the
    JSON schema the SDK sends for it."""

    __slots__ = ("_kwargs",)

    def __init__(self, kwargs: Mapping[str, Any]) -> None:
        self._kwargs = kwargs

    def __repr__(self) -> str:  # no request content in reprs
        return "_SentParams()"

    def __getitem__(self, key: str) -> Any:
        value = self._kwargs[key]
        if key == "response_format" and isinstance(value, type):
            from openai.lib._parsing import type_to_response_format_param

            return type_to_response_format_param(value)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._kwargs)

    def __len__(self) -> int:
        return len(self._kwargs)


class SdkTurns:
    """Capture/finish plumbing shared by the sync and async ``create``."""

    def __init__(self, monitor: Monitor, shadow: Callable[[], ShadowSource | None] | None = None) -> None:
        self.monitor = monitor
        self.parser = RequestParser.from_config(monitor.config)
        self.shadow = shadow
        self.background = Background(history_bytes)
        """Background Responses calls waiting for ``retrieve`` (shared with a client copy's)."""

    def with_shadow(self, shadow: Callable[[], ShadowSource | None] | None) -> SdkTurns:
        """These turns (the same monitor and parser) with their shadow calls made by ``shadow``:
        a client copy's (``ClientWrapper._derived``)."""
        turns = copy.copy(self)
        turns.shadow = shadow
        return turns

    def offer(
        self, cap: Capture, api: bool = False, request: Mapping[str, Any] | None = None
    ) -> ShadowOffer | None:
        """The turn's shadow offer when the runtime runs shadow continuation (``api``: a call of
        another API, read as chat; ``request``: a chat call's arguments, ``_Chat``); on the
        thread the call finished on (an async client's source is bound to that loop)."""
        return _offer(self.shadow() if self.shadow is not None else None, cap, api, request)

    def begin(
        self, kwargs: Mapping[str, Any], api: Api | None = None, headers: Mapping[str, str] | None = None
    ) -> Capture | _Pending | None:
        """The turn's capture; ``None`` when it is not monitored (a Responses API call naming a
        stored history it cannot be attributed from). A call of another API (``api``) without
        metadata or extra headers/body is only copied here (``_Pending``): its request is read
        as chat when the reply is finished (ADR 0002), its shadow offer made there too.
        ``headers``: the client's default caller headers, read under the call's own
        (``as_sent``); a copy of them goes with a ``_Pending`` call (the application's
        arguments stay its own)."""
        drain_finalized()  # streams dropped earlier are reported here, never from a finalizer
        try:
            if api is None:
                return self.monitor.capture(self.parser.openai_call(as_sent(kwargs, headers)))
            if _KEPT_NOW.isdisjoint(kwargs):
                t0 = time.perf_counter()
                kept = snapshot(kwargs)
                if headers:
                    kept["extra_headers"] = dict(headers)
                return _Pending(kept, time.perf_counter() - t0, api)
            return self._api_capture(as_sent(kwargs, headers), api)
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
        self,
        ctx: _Pending,
        response: Any,
        headers: Mapping[str, Any] | None,
        latency_s: float,
        source: ShadowSource | None,
    ) -> Built | None:
        """``Monitor.finish_later``'s build for a non-streamed ``_Pending`` call (``source``: its
        shadow source, taken when the call finished)."""
        cap = self.resolve(ctx)
        doc = ctx.api.as_chat(response)
        if self.monitor.no_reply(doc):  # finished without a reply (failed): counted, no turn
            return None
        reply = readable_reply(self.monitor, doc)
        if cap is None or reply is None:
            return None
        outcome = Deferred(describe_response, (self.monitor.names, doc, served_by_headers(headers)))
        return cap, reply, outcome, latency_s, _offer(source, cap, True)

    def finish(
        self,
        cap: Capture | _Pending,
        response: Any,
        headers: Mapping[str, Any] | None,
        t0: float,
        api: Api | None = None,
        request: Mapping[str, Any] | None = None,
    ) -> None:
        """Record a non-streamed call (``request``: a chat call's arguments, for its shadow call)."""
        if isinstance(cap, _Pending):  # read on the attribution thread, in order with other turns
            source = self.shadow() if self.shadow is not None else None
            self.monitor.finish_later(
                self._read_later,
                (cap, response, headers, time.perf_counter() - t0, source),
                weight=weigh_call(self.monitor, cap.kwargs),
            )
            return
        try:
            served = served_by_headers(headers)
            if api is not None:  # another API's response, read as a chat completion
                response = api.as_chat(response)
                if response is None:  # no finished response (a queued background one is parked)
                    return
                if self.monitor.no_reply(response):  # finished without a reply: counted, no turn
                    return
            reply = readable_reply(self.monitor, response)
            if reply is None:  # no choice (``choices: []``): no reply, no turn, counted (as ``serve``)
                return
            self.monitor.finish(
                cap,
                reply,
                Deferred(describe_response, (self.monitor.names, response, served)),
                latency_s=time.perf_counter() - t0,
                shadow=self.offer(cap, api is not None, request),
                weight=weigh(self.monitor, cap.request.messages),
            )
        except Exception as exc:
            self.monitor.errors.failed("integration", exc, "could not read a completion")

    def stream_done(
        self,
        ctx: Capture | _Pending,
        headers: Mapping[str, Any] | None,
        t0: float,
        out: StreamOutcome,
        api: bool = False,
        request: Mapping[str, Any] | None = None,
    ) -> None:
        """Record a stream that ended (``request``: a chat call's arguments, for its shadow call)."""
        try:
            if not self.monitor.stream_recordable(out) or not out.chunks:
                return  # no chunk at all (an error event first, closed at once): no reply, no turn
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
                shadow=self.offer(cap, api, request),
                weight=weigh(self.monitor, cap.request.messages),
            )
        except Exception as exc:
            self.monitor.errors.failed("integration", exc, "could not finish a streamed completion")


def listed(kwargs: dict[str, Any]) -> None:
    """``messages`` given as a one-shot iterable (a generator: the SDKs type it ``Iterable``),
    read once into a list that both the SDK and the monitor get, in place in the wrapper's own
    ``kwargs``. Read by the monitor first, a generator reached the SDK empty; left alone, the
    monitor saw no history (the turn recorded at depth 1, its prompt empty). The request sent
    is the same either way. Lists, tuples and what is not iterable are left as they are."""
    messages = kwargs.get("messages")
    if messages is None or type(messages) is list or type(messages) is tuple:
        return
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
        return
    if hasattr(messages, "model_dump"):  # a pydantic model iterates its fields: the SDK's to refuse
        return
    kwargs["messages"] = list(messages)  # what the generator raises, the SDK would have raised


def _offer(
    source: ShadowSource | None, cap: Capture, api: bool, request: Mapping[str, Any] | None = None
) -> ShadowOffer | None:
    """A turn's shadow offer from its integration's ``source`` (``None``: shadow off; ``request``:
    a chat call's arguments, whose generation parameters the shadow call repeats)."""
    messages = cap.request.messages
    if source is None or not messages:
        return None
    return offer_of(source, messages, cap.request.link, api, request)


def _raw(completions: Any, name: str) -> Any:
    """``completions.with_raw_response.<name>`` when the SDK has it (gives us the headers)."""
    raw = getattr(completions, "with_raw_response", None)
    return getattr(raw, name, None)


def _folder(api: Api | None) -> Folder | None:
    return api.folder(MAX_REPLY_CHARS) if api is not None else None


class _Calls(Forwarding):
    """A wrapped SDK resource: ``chat.completions`` (or, with ``api``, the resource of that API:
    ``responses``, an Anthropic client's ``messages``) with ``create`` and ``parse``
    (structured outputs) monitored, also when called through ``with_raw_response`` or
    ``with_streaming_response`` (``sdk_views``); every other attribute is the SDK's."""

    _stream: Callable[..., Any]  # SyncStream or AsyncStream

    def __init__(
        self, inner: Any, turns: SdkTurns, api: Api | None = None, headers: Mapping[str, str] | None = None
    ) -> None:
        self._inner = inner
        self._turns = turns
        self._api = api
        self._headers = headers or {}  # the client's default caller headers (``caller_headers``)

    def stream(self, **kwargs: Any) -> Any:
        """The SDK's ``stream`` helper, making its request through the monitored ``create``; left
        early, its stream is recorded at the ``with`` block's exit (``StreamHelper``)."""
        return stream_helper(type(self._inner).stream(self, **kwargs))

    @property
    def with_raw_response(self) -> RawCalls:
        """``create`` and ``parse`` returning the SDK's raw response, monitored."""
        return RawCalls(self)

    @property
    def with_streaming_response(self) -> StreamingCalls:
        """``create`` and ``parse`` as the SDK's streamed-response context managers, monitored."""
        return StreamingCalls(self)

    def _begin(self, kwargs: dict[str, Any]) -> Capture | _Pending | _Chat | None:
        """The call's capture, its request read with the headers the SDK sends (the client's
        default caller headers under the call's ``extra_headers``: ``as_sent``). ``kwargs`` is
        the wrapper's own dict of the call's arguments (``listed`` may replace its messages):
        a chat call's capture goes with it (``_Chat``) when shadow continuation may run."""
        listed(kwargs)
        ctx = self._turns.begin(kwargs, self._api, self._headers)
        if self._api is None and isinstance(ctx, Capture) and self._turns.shadow is not None:
            return _Chat(ctx, _SentParams(kwargs))
        return ctx

    def _monitored(
        self, ctx: Capture | _Pending | _Chat, response: Any, headers: Any, t0: float, stream: bool
    ) -> Any:
        """What the application gets for the parsed body ``response`` of a monitored call: a
        stream recorded when it ends, or ``response`` itself, recorded now."""
        api = self._api
        request: Mapping[str, Any] | None = None
        if isinstance(ctx, _Chat):
            request = ctx.kwargs
            ctx = ctx.cap
        turn = ctx
        if stream:
            return self._stream(
                response,
                lambda out, _i: self._turns.stream_done(turn, headers, t0, out, api is not None, request),
                _folder(api),
            )
        if api is RESPONSES and unfinished(response):  # background=True: the reply comes later
            self._park(response, ctx, t0)
            return response
        self._turns.finish(ctx, response, headers, t0, api, request)
        return response

    def _park(self, response: Any, ctx: Capture | _Pending, t0: float) -> None:
        """Keep a background call's turn until ``retrieve`` returns its reply (``background``)."""
        try:
            self._turns.background.park(get(response, "id"), ctx, t0)
        except Exception as exc:
            self._turns.monitor.errors.failed("integration", exc, "could not park a background call")

    def _parked(self, response_id: Any, kwargs: Mapping[str, Any]) -> bool:
        """Whether a ``retrieve`` may finish a parked background call (not a resumed stream)."""
        return not kwargs.get("stream") and self._turns.background.waiting(response_id)

    def _retrieved(self, response_id: str, response: Any, headers: Any) -> None:
        """A ``retrieve`` of a parked call: its turn recorded with the response once finished."""
        try:
            if unfinished(response):  # still queued or in progress: polled again later
                return
            parked = self._turns.background.take(response_id)
            if parked is not None:
                self._turns.finish(parked.ctx, response, headers, parked.t0, RESPONSES)
        except Exception as exc:
            self._turns.monitor.errors.failed("integration", exc, "could not read a retrieved response")

    def _forget(self, response_id: Any) -> None:
        """``cancel`` / ``delete`` of a response: no reply of it will be a turn."""
        try:
            self._turns.background.forget(response_id)
        except Exception as exc:  # pragma: no cover - the registry does not raise
            self._turns.monitor.errors.failed("integration", exc, "could not forget a background call")

    def _raw_result(
        self, result: Any, ctx: Capture | _Pending | _Chat, response: Any, t0: float, stream: bool
    ) -> Any:
        """What ``with_raw_response`` returns: the SDK's raw response ``result`` (``response``
        is its parsed body); for a stream, one whose ``parse()`` gives the monitored stream."""
        monitored = self._monitored(ctx, response, result.headers, t0, stream)
        return result if monitored is response else parsed_response(result, done=monitored)

    def _unparsed(self, exc: Exception) -> None:
        self._turns.monitor.errors.failed("integration", exc, "could not parse a raw response")


class SyncCalls(_Calls):
    """A sync client's resource (see :class:`_Calls`)."""

    _stream = SyncStream

    def create(self, **kwargs: Any) -> Any:
        """``create`` monitored; returns exactly what the SDK returns."""
        return self._call("create", kwargs)

    def parse(self, **kwargs: Any) -> Any:
        """``parse`` (structured outputs: the reply also parsed into the given type) monitored
        like ``create``: the SDK posts it without ``create``. Returns what the SDK returns."""
        return self._call("parse", kwargs)

    def _call(self, name: str, kwargs: dict[str, Any], raw: bool = False) -> Any:
        ctx, stream = self._begin(kwargs), bool(kwargs.get("stream"))
        t0 = time.perf_counter()
        if raw:  # the application's with_raw_response call
            call = getattr(self._inner.with_raw_response, name)
        else:  # through with_raw_response when the SDK has it (for the headers)
            call = _raw(self._inner, name) if ctx is not None else None
        if call is None:
            response = getattr(self._inner, name)(**kwargs)
            return response if ctx is None else self._monitored(ctx, response, None, t0, stream)
        result = call(**kwargs)
        if ctx is None:
            return result
        if not raw:
            return self._monitored(ctx, result.parse(), result.headers, t0, stream)
        try:  # the application parses later: a body the SDK cannot parse is its error to see then
            response = result.parse()
        except Exception as exc:
            self._unparsed(exc)
            return result
        return self._raw_result(result, ctx, response, t0, stream)


class AsyncCalls(_Calls):
    """An async client's resource (see :class:`_Calls`)."""

    _stream = AsyncStream

    async def create(self, **kwargs: Any) -> Any:
        """``create`` monitored; returns exactly what the SDK returns."""
        return await self._call("create", kwargs)

    async def parse(self, **kwargs: Any) -> Any:
        """``parse`` (structured outputs) monitored like ``create``; returns what the SDK returns."""
        return await self._call("parse", kwargs)

    async def _call(self, name: str, kwargs: dict[str, Any], raw: bool = False) -> Any:
        ctx, stream = self._begin(kwargs), bool(kwargs.get("stream"))
        t0 = time.perf_counter()
        if raw:
            call = getattr(self._inner.with_raw_response, name)
        else:
            call = _raw(self._inner, name) if ctx is not None else None
        if call is None:
            response = await getattr(self._inner, name)(**kwargs)
            return response if ctx is None else self._monitored(ctx, response, None, t0, stream)
        result = await call(**kwargs)
        if ctx is None:
            return result
        try:
            response = result.parse()
            if inspect.isawaitable(response):  # the non-legacy raw response parses asynchronously
                response = await response
        except Exception as exc:
            if not raw:
                raise
            self._unparsed(exc)
            return result
        if not raw:
            return self._monitored(ctx, response, result.headers, t0, stream)
        return self._raw_result(result, ctx, response, t0, stream)


class SyncResponses(SyncCalls):
    """A sync client's ``responses``: ``create`` and ``parse`` as :class:`SyncCalls`, and
    ``retrieve`` recording the turn of a background call it finds finished
    (``integrations.background``)."""

    def retrieve(self, response_id: str, **kwargs: Any) -> Any:
        """The SDK's ``retrieve``; returns what the SDK returns."""
        if not self._parked(response_id, kwargs):
            return self._inner.retrieve(response_id, **kwargs)
        raw = _raw(self._inner, "retrieve")
        if raw is None:
            response, headers = self._inner.retrieve(response_id, **kwargs), None
        else:
            result = raw(response_id, **kwargs)
            response, headers = result.parse(), result.headers
        self._retrieved(response_id, response, headers)
        return response

    def cancel(self, response_id: str, **kwargs: Any) -> Any:
        """The SDK's ``cancel``; a parked background call is forgotten."""
        self._forget(response_id)
        return self._inner.cancel(response_id, **kwargs)

    def delete(self, response_id: str, **kwargs: Any) -> Any:
        """The SDK's ``delete``; a parked background call is forgotten."""
        self._forget(response_id)
        return self._inner.delete(response_id, **kwargs)


class AsyncResponses(AsyncCalls):
    """An async client's ``responses`` (see :class:`SyncResponses`)."""

    async def retrieve(self, response_id: str, **kwargs: Any) -> Any:
        """The SDK's ``retrieve``; returns what the SDK returns."""
        if not self._parked(response_id, kwargs):
            return await self._inner.retrieve(response_id, **kwargs)
        raw = _raw(self._inner, "retrieve")
        if raw is None:
            response, headers = await self._inner.retrieve(response_id, **kwargs), None
        else:
            result = await raw(response_id, **kwargs)
            response, headers = result.parse(), result.headers
            if inspect.isawaitable(response):  # the non-legacy raw response parses asynchronously
                response = await response
        self._retrieved(response_id, response, headers)
        return response

    async def cancel(self, response_id: str, **kwargs: Any) -> Any:
        """The SDK's ``cancel``; a parked background call is forgotten."""
        self._forget(response_id)
        return await self._inner.cancel(response_id, **kwargs)

    async def delete(self, response_id: str, **kwargs: Any) -> Any:
        """The SDK's ``delete``; a parked background call is forgotten."""
        self._forget(response_id)
        return await self._inner.delete(response_id, **kwargs)


def caller_headers(client: Any, header_name: str) -> dict[str, str]:
    """The headers among the SDK client's ``default_headers`` a request parser reads (the
    configured conversation-id header, ``CALLER_HEADERS``, ``traceparent``), by lower-case
    name; usually none. The SDK sends them with every request, so ``serve`` and the LiteLLM
    Proxy callback read them there: the wrapper reads them too. Nothing else is kept (the
    defaults include the API key)."""
    try:
        defaults = client.default_headers
    except Exception:  # a look-alike client without the SDK's property
        return {}
    if not isinstance(defaults, Mapping):
        return {}
    wanted = {header_name.lower(), *CALLER_HEADERS, "traceparent"}
    return {
        k.lower(): v
        for k, v in defaults.items()
        if isinstance(k, str) and isinstance(v, str) and k.lower() in wanted
    }


def as_sent(kwargs: Mapping[str, Any], defaults: Mapping[str, str] | None) -> Mapping[str, Any]:
    """``kwargs`` with ``extra_headers`` as the SDK merges them into what it sends: ``defaults``
    (``caller_headers``), each overridden by the call's header of that name (case-insensitive),
    and removed when the call omits it (``openai.omit``: any value that is not a string). Only
    the parser sees this copy; the SDK gets the application's own arguments. Without defaults,
    ``kwargs`` itself."""
    if not defaults:
        return kwargs
    merged = dict(defaults)
    extra = kwargs.get("extra_headers")
    if isinstance(extra, Mapping):
        for name, value in extra.items():
            if not isinstance(name, str):
                continue
            if isinstance(value, str):
                merged[name.lower()] = value
            else:
                merged.pop(name.lower(), None)
    return {**kwargs, "extra_headers": merged}


Paths = dict[tuple[str, ...], _Calls]
"""A client wrapper's monitored resources by attribute path (``("chat", "completions")``)."""


def _tree(inner: Any, paths: Mapping[tuple[str, ...], Any]) -> dict[str, Any]:
    """The attributes of a :class:`View` of ``inner`` putting each of ``paths``' values at its
    path: a one-name path is the value, a longer one a view of the SDK's object at its first
    name. An object the SDK does not have there is left out (the application cannot reach it)."""
    out: dict[str, Any] = {}
    deeper: dict[str, dict[tuple[str, ...], Any]] = {}
    for path, leaf in paths.items():
        if len(path) == 1:
            out[path[0]] = leaf
        else:
            deeper.setdefault(path[0], {})[path[1:]] = leaf
    for name, sub in deeper.items():
        try:
            child = getattr(inner, name)
        except AttributeError:
            continue
        out[name] = View(child, **_tree(child, sub))
    return out


class ClientWrapper:
    """What an SDK client's wrapper shows besides its monitored resources (``_resources``): the
    runtime, the monitor, the client, ``with_raw_response`` / ``with_streaming_response`` views
    whose monitored resources are the wrapper's, ``with_options`` / ``copy`` wrapping the
    copied client with the same monitor, and every other attribute of the client.

    Args:
        client: the SDK client.
        monitor: the monitor that records turns.
        runtime: the runtime that owns ``monitor`` (``wrap`` passes it), if any.
    """

    def __init__(self, client: Any, monitor: Monitor, *, runtime: Runtime | None = None) -> None:
        self._client = client
        self._monitor = monitor
        self._runtime = runtime
        self._turns = self._new_turns()
        self._attach()

    def _new_turns(self) -> SdkTurns:
        return SdkTurns(self._monitor)

    def _turns_for(self, client: Any) -> SdkTurns:
        """The turn plumbing of a wrapper of ``client``, a copy of this wrapper's client."""
        return self._turns

    def _resources(self) -> Paths:
        """The client's resources, wrapped (``SyncCalls`` / ``AsyncCalls``), by path."""
        raise NotImplementedError

    def _attach(self) -> None:
        self._paths = self._resources()
        self.__dict__.update(_tree(self._client, self._paths))

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        """The wrapped client's class, so ``isinstance(wrapper, openai.OpenAI)`` holds, as for
        ``wrapt.ObjectProxy``: libraries that check a client's type before using it
        (``instructor.from_openai``) take the wrapper. ``type(wrapper)`` stays the wrapper's."""
        return type(self._client)

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

    @property
    def with_raw_response(self) -> View:
        """The client's ``with_raw_response``, its monitored resources' calls monitored."""
        inner = self._client.with_raw_response
        return View(inner, **_tree(inner, {p: c.with_raw_response for p, c in self._paths.items()}))

    @property
    def with_streaming_response(self) -> View:
        """The client's ``with_streaming_response``, its monitored resources' calls monitored."""
        inner = self._client.with_streaming_response
        return View(inner, **_tree(inner, {p: c.with_streaming_response for p, c in self._paths.items()}))

    def with_options(self, **options: Any) -> Any:
        """The SDK's ``with_options``: the copied client, wrapped with the same monitor."""
        return self._derived(self._client.with_options(**options))

    def copy(self, **options: Any) -> Any:
        """The SDK's ``copy``: the copied client, wrapped with the same monitor."""
        return self._derived(self._client.copy(**options))

    def _derived(self, client: Any) -> Any:
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)  # the same monitor, runtime and turn plumbing
        new._client = client
        new._turns = self._turns_for(client)  # its shadow calls made by the copy, not by us
        new._attach()
        return new

    def __copy__(self) -> Any:
        """``copy.copy``: a wrapper of the same client, recording into the same monitor."""
        return self._derived(self._client)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        """``copy.deepcopy``: the client deep-copied (as the SDK allows), the same monitor."""
        return self._derived(copy.deepcopy(self._client, memo))

    def __getattr__(self, name: str) -> Any:
        if name == "_client":  # not set yet (an instance made without __init__): no recursion
            raise AttributeError(name)
        return getattr(self._client, name)

    _OWN = frozenset({"_client", "_monitor", "_runtime", "_turns", "_paths"})
    """The wrapper's own instance attributes; any other write goes to the client."""

    def __setattr__(self, name: str, value: Any) -> None:
        """A write reaches the client (``wrapped.api_key = "new"``: the next request sends the new
        key), as reads do; the wrapper's own attributes and methods stay its own."""
        set_forwarded(self, "_client", self._OWN, name, value)

    def __delattr__(self, name: str) -> None:
        del_forwarded(self, "_client", self._OWN, name)

    # ``with`` / ``async with``: special methods are looked up on the type, never through
    # ``__getattr__``, so the wrapper delegates them itself and gives itself to the block
    # (calls made inside stay monitored).

    def __enter__(self) -> Any:
        _special(self._client, "__enter__", "")()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._client.__exit__(*exc)

    async def __aenter__(self) -> Any:
        await _special(self._client, "__aenter__", "asynchronous ")()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._client.__aexit__(*exc)


def _special(client: Any, name: str, kind: str) -> Any:
    """The client's bound special method ``name``; the ``TypeError`` a ``with`` on the client
    itself raises when it has none (an async client in a plain ``with``)."""
    method = getattr(client, name, None)
    if method is None:
        raise TypeError(
            f"{type(client).__name__!r} object does not support the {kind}context manager protocol"
        )
    return method


class OpenAIClientWrapper(ClientWrapper):
    """An OpenAI-compatible client with handoffmon around ``chat.completions.create`` and
    ``responses.create`` (the ``stream`` helpers make their requests through them) and their
    ``parse`` helpers, also when called through ``with_raw_response`` or
    ``with_streaming_response``, on ``beta.chat.completions`` or on a ``with_options`` copy
    (``sdk_views``). A Responses API call continuing a stored response or a ``conversation``
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

    def _new_turns(self) -> SdkTurns:
        is_async = is_async_client(self._client, "openai", "AsyncOpenAI")
        return SdkTurns(self._monitor, _shadow(self._client, self._monitor, self._runtime, is_async))

    def _turns_for(self, client: Any) -> SdkTurns:
        """A copy's turns: shadow continuation of its turns goes through the copy (its
        ``base_url``, default headers, timeout), as the application's calls on it do."""
        if self._turns.shadow is None:
            return self._turns
        is_async = is_async_client(client, "openai", "AsyncOpenAI")
        return self._turns.with_shadow(_shadow(client, self._monitor, self._runtime, is_async))

    def _resources(self) -> Paths:
        client, turns = self._client, self._turns
        is_async = is_async_client(client, "openai", "AsyncOpenAI")
        kind = AsyncCalls if is_async else SyncCalls
        headers = caller_headers(client, turns.parser.header_name)
        paths: Paths = {("chat", "completions"): kind(client.chat.completions, turns, headers=headers)}
        responses = getattr(client, "responses", None)  # SDKs before the Responses API lack it
        if responses is not None:
            api_kind = AsyncResponses if is_async else SyncResponses
            paths[("responses",)] = api_kind(responses, turns, api=RESPONSES, headers=headers)
        beta = getattr(getattr(client, "beta", None), "chat", None)  # LangChain's structured streams
        if beta is not None and getattr(beta, "completions", None) is not None:
            paths["beta", "chat", "completions"] = kind(beta.completions, turns, headers=headers)
        return paths


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
