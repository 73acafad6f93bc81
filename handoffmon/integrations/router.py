"""``wrap(litellm.Router)``: same call surface, each turn monitored (composition, not a subclass)."""

from __future__ import annotations

import inspect
import time
import types
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from handoffmon.ingress import (
    RequestParser,
    StreamOutcome,
    describe_response,
    describe_stream,
    served_by_response,
)
from handoffmon.ingress.apis import MESSAGES, RESPONSES, Api
from handoffmon.ingress.chunks import MAX_REPLY_CHARS
from handoffmon.ingress.served import after_fallbacks
from handoffmon.ingress.sse import SSEFolder
from handoffmon.integrations.forwarding import del_forwarded, set_forwarded
from handoffmon.integrations.held import weigh, weigh_call
from handoffmon.integrations.module_batch import BATCH_HELPERS, calling_through
from handoffmon.integrations.responses_calls import api_messages, linked, readable_reply, snapshot
from handoffmon.integrations.streaming import AsyncStream, SyncStream, drain_finalized
from handoffmon.pipeline.monitor import Monitor
from handoffmon.pipeline.records import Built, Capture, Deferred
from handoffmon.shadow.turns import ShadowOffer, offer_of

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.ingress import Outcome
    from handoffmon.ingress.served import ServedBy
    from handoffmon.integrations.router_routing import RouterRouting
    from handoffmon.integrations.router_shadow import RouterShadow
    from handoffmon.runtime import Runtime


MAX_DEPLOYMENT_NAMES = 10_000
"""Bound on the cache of deployment id → provider model string."""

_PARSED_NOW = frozenset({"stream", "metadata", "extra_headers", "headers"})
"""Call arguments that keep the request parsed on the request path: streams, and metadata or
headers (the application's own mappings, which it may change after the call)."""

_UNREAD: Any = object()


_MODULE_RESPONSES_ARGS = ("input", "model")
"""The positional parameters of ``litellm.responses`` / ``aresponses``, in order."""

_KEPT_NOW = frozenset({"metadata", "extra_headers", "headers"})
"""Responses call arguments that keep the request read when the call is made: the
application's own mappings, which it may change after the call."""


_Stream = SyncStream | AsyncStream


class RouterWrapper:
    """A ``litellm.Router`` with handoffmon around ``completion`` / ``acompletion`` and
    ``responses`` / ``aresponses`` (the Responses API, read as chat by ``ingress.responses``;
    calls continuing server-side state pass through unmonitored).

    Every other attribute passes through to the router, written as well as read. Responses
    (and streamed chunks) are returned unchanged; monitoring failures are counted, never
    raised. A router error propagates unchanged (no reply, so no turn is recorded). Who served
    a reply is read from the response's ``_hidden_params`` on the attribution thread.

    Args:
        router: the router (or any object with litellm-style ``completion``/``acompletion``).
        monitor: the monitor that records turns.
        runtime: the runtime that owns ``monitor`` (``wrap`` passes it), if any.
    """

    def __init__(self, router: Any, monitor: Monitor, *, runtime: Runtime | None = None) -> None:
        self._router = router
        self._monitor = monitor
        self._runtime = runtime
        self._parser = RequestParser.from_config(monitor.config)
        self._dep_names: dict[str, str | None] = {}
        self._routing = _routing(router, monitor, runtime)
        self._shadow = _shadow(router, monitor, runtime)
        # no trace context to take from this thread: the request can be parsed, and the reply
        # read, on the attribution thread (``_lean``), its shadow offer made there too
        self._lean = not self._parser.trace
        # the litellm module: its own ``fallbacks=`` argument names who may answer (``_tried``)
        self._module = isinstance(router, types.ModuleType)

    @property
    def runtime(self) -> Runtime | None:
        """The runtime owning the monitor (``None`` for a bare monitor)."""
        return self._runtime

    @property
    def monitor(self) -> Monitor:
        """The monitor recording this router's turns."""
        return self._monitor

    @property
    def router(self) -> Any:
        """The wrapped router."""
        return self._router

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        """The wrapped router's class, so ``isinstance(wrapper, litellm.Router)`` holds (as a
        client wrapper passes for its SDK client): code that types its router (a pydantic
        field, an ``isinstance`` check) takes the wrapper. ``type(wrapper)`` stays the wrapper's."""
        return type(self._router)

    def __getattr__(self, name: str) -> Any:
        if name == "_router":  # not set yet (an instance made without __init__): no recursion
            raise AttributeError(name)
        attr = getattr(self._router, name)
        if name in BATCH_HELPERS and self._module:  # litellm's helpers calling litellm.completion
            return self._helper(name, attr)
        return attr

    def _helper(self, name: str, helper: Any) -> Any:
        """:func:`calling_through` of litellm's ``helper``, made once per helper (9 µs: it builds
        a function and its globals) and kept while ``litellm.<name>`` is that helper and this
        wrapper the one it calls (a ``copy.copy`` shares the dict, not the copies). The copy
        reads litellm's other globals live, so nothing else can make it stale."""
        kept = self.__dict__.setdefault("_helpers", {})
        hit = kept.get(name)
        if hit is not None and hit[0] is helper and hit[1] is self:
            return hit[2]
        through = calling_through(helper, self.completion)
        kept[name] = (helper, self, through)  # at most len(BATCH_HELPERS) entries
        return through

    _OWN = frozenset(
        {
            "_router",
            "_monitor",
            "_runtime",
            "_parser",
            "_dep_names",
            "_routing",
            "_shadow",
            "_lean",
            "_module",
            "_helpers",
        }
    )
    """The wrapper's own instance attributes; any other write goes to the router."""

    def __setattr__(self, name: str, value: Any) -> None:
        """A write reaches the router (``wrapped.fallbacks = [...]``, ``wrap(litellm).drop_params =
        True``), as reads do; the wrapper's own attributes and methods stay its own."""
        set_forwarded(self, "_router", self._OWN, name, value)

    def __delattr__(self, name: str) -> None:
        del_forwarded(self, "_router", self._OWN, name)

    # -- calls --------------------------------------------------------------------------

    def completion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
        """``Router.completion`` with monitoring; ``stream=True`` returns a wrapped iterator.
        (``args``: options the wrapped callable takes by position, ``_by_name``.)"""
        drain_finalized()
        if args:
            named = _by_name(self._router.completion, args, kwargs)
            if named is None:  # they do not fit: the router's own error, as unwrapped
                return self._router.completion(model, messages, *args, **kwargs)
            kwargs = named
        if self._routing is not None:
            kwargs = self._routing.apply(model, messages, kwargs) or kwargs
        tried = _tried(model, kwargs) if self._module else None
        if self._lean and type(messages) is list and _PARSED_NOW.isdisjoint(kwargs):
            t0 = time.perf_counter()
            snapshot = messages.copy()
            t1 = time.perf_counter()
            response = self._router.completion(model=model, messages=messages, **kwargs)
            self._lean_finish(model, snapshot, kwargs, response, t0, t1, tried)
            return response
        cap = self._capture(model, messages, kwargs)
        t0 = time.perf_counter()
        response = self._router.completion(model=model, messages=messages, **kwargs)
        if cap is None:
            return response
        if kwargs.get("stream"):
            return SyncStream(
                response,
                lambda out, inner: self._stream_done(cap, t0, out, inner, tried=tried, request=kwargs),
            )
        self._finish(cap, response, time.perf_counter() - t0, tried, kwargs)
        return response

    async def acompletion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
        """``Router.acompletion`` with monitoring; ``stream=True`` returns a wrapped async iterator.
        (``args``: options the wrapped callable takes by position, as ``Router.acompletion(model,
        messages, stream)``: ``_by_name``.)"""
        drain_finalized()
        if args:
            named = _by_name(self._router.acompletion, args, kwargs)
            if named is None:  # they do not fit: the router's own error, as unwrapped
                return await self._router.acompletion(model, messages, *args, **kwargs)
            kwargs = named
        if self._routing is not None:
            kwargs = self._routing.apply(model, messages, kwargs) or kwargs
        tried = _tried(model, kwargs) if self._module else None
        if self._lean and type(messages) is list and _PARSED_NOW.isdisjoint(kwargs):
            t0 = time.perf_counter()
            snapshot = messages.copy()
            t1 = time.perf_counter()
            response = await self._router.acompletion(model=model, messages=messages, **kwargs)
            self._lean_finish(model, snapshot, kwargs, response, t0, t1, tried)
            return response
        cap = self._capture(model, messages, kwargs)
        t0 = time.perf_counter()
        response = await self._router.acompletion(model=model, messages=messages, **kwargs)
        if cap is None:
            return response
        if kwargs.get("stream"):
            return AsyncStream(
                response,
                lambda out, inner: self._stream_done(cap, t0, out, inner, tried=tried, request=kwargs),
            )
        self._finish(cap, response, time.perf_counter() - t0, tried, kwargs)
        return response

    async def abatch_completion(self, *args: Any, **kwargs: Any) -> Any:
        """``Router.abatch_completion`` (one request to several models, or several to several)
        with each of its chat calls a monitored turn: see :meth:`_batch`."""
        return await self._batch("abatch_completion", args, kwargs)

    async def abatch_completion_one_model_multiple_requests(self, *args: Any, **kwargs: Any) -> Any:
        """``Router.abatch_completion_one_model_multiple_requests``, each request a monitored
        turn: see :meth:`_batch`."""
        return await self._batch("abatch_completion_one_model_multiple_requests", args, kwargs)

    async def abatch_completion_fastest_response(self, *args: Any, **kwargs: Any) -> Any:
        """``Router.abatch_completion_fastest_response``, its calls monitored (the one answering
        first is the turn the application gets; the others are cancelled, and one that completes
        in the same instant is counted too). Streamed, it passes through unmonitored: LiteLLM
        keeps only a reply of its own stream type, and a monitored stream is the wrapper's."""
        if kwargs.get("stream"):
            return await self._router.abatch_completion_fastest_response(*args, **kwargs)
        return await self._batch("abatch_completion_fastest_response", args, kwargs)

    async def schedule_acompletion(self, *args: Any, **kwargs: Any) -> Any:
        """``Router.schedule_acompletion`` (request prioritization: the call waits for the
        scheduler's turn), its ``acompletion`` the monitored one: see :meth:`_batch`."""
        return await self._batch("schedule_acompletion", args, kwargs)

    async def _batch(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """LiteLLM's batch method ``name`` run with this wrapper as ``self``: the
        ``self.acompletion`` it calls for each model and request is the monitored one, and
        everything else it reads passes through to the router. (The batch methods call the
        router's own ``acompletion``; calling them on the router would record nothing.) Should
        a LiteLLM release make its calls some other way, they reach the router unmonitored."""
        method = getattr(type(self._router), name, None)
        if method is None or self._module:
            return await getattr(self._router, name)(*args, **kwargs)
        return await method(self, *args, **kwargs)

    def responses(self, *args: Any, **kwargs: Any) -> Any:
        """``Router.responses`` with monitoring; ``stream=True`` returns a wrapped iterator. (Not
        rerouted: litellm 1.108's sync ``responses`` does not fall back, and a ``fallbacks``
        argument reaches the deployment's own SDK call.)"""
        drain_finalized()
        t0 = time.perf_counter()
        named = self._named(args, kwargs)
        ctx = self._begin_api(named, RESPONSES)
        t1 = time.perf_counter()
        response = self._router.responses(*args, **kwargs)
        return self._api_done(ctx, named, response, t0, t1, SyncStream, RESPONSES)

    async def aresponses(self, *args: Any, **kwargs: Any) -> Any:
        """``Router.aresponses`` with monitoring, its fallbacks in risk-aware order when routing is
        on; ``stream=True`` returns a wrapped async iterator."""
        drain_finalized()
        if self._routing is not None:
            kwargs = self._route_responses(args, kwargs)
        t0 = time.perf_counter()
        named = self._named(args, kwargs)
        ctx = self._begin_api(named, RESPONSES)
        t1 = time.perf_counter()
        response = await self._router.aresponses(*args, **kwargs)
        return self._api_done(ctx, named, response, t0, t1, AsyncStream, RESPONSES)

    async def aanthropic_messages(self, *args: Any, **kwargs: Any) -> Any:
        """``Router.aanthropic_messages`` with monitoring (the Anthropic Messages API read as
        chat, ADR 0012); ``stream=True`` returns a wrapped async iterator of the SSE bytes.
        (litellm 1.108's sync ``anthropic_messages`` returns this coroutine: it passes through.)"""
        drain_finalized()
        t0 = time.perf_counter()
        ctx = self._begin_api(kwargs, MESSAGES)
        t1 = time.perf_counter()
        response = await self._router.aanthropic_messages(*args, **kwargs)
        return self._api_done(ctx, kwargs, response, t0, t1, AsyncStream, MESSAGES)

    def _named(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """A Responses call's arguments by name, for reading it: the litellm module's
        ``responses(input, model, ...)`` takes its input and model positionally too (a Router's
        take keywords only). The call itself is made with the arguments as given."""
        if not args or not self._module:
            return kwargs
        return {**dict(zip(_MODULE_RESPONSES_ARGS, args, strict=False)), **kwargs}

    def _route_responses(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """A Responses API call's kwargs with its fallbacks in risk-aware order: its history read
        as chat on the request path (routing needs the prefix before the call), a continued
        history's authors from what was recorded of it. Unreadable: the call as made."""
        assert self._routing is not None
        try:
            read = api_messages(kwargs, RESPONSES, via_litellm=True)
        except Exception:  # the readers are total; this guards the plumbing (fail open)
            read = None
        if read is None:
            return kwargs
        model = kwargs.get("model", args[0] if args else None)
        return self._routing.apply(model, read[0], kwargs, read[1]) or kwargs

    # -- monitoring ---------------------------------------------------------------------

    def _finish_as_chat(self, cap: Capture, response: Any, as_chat: Callable[[Any], Any], t1: float) -> None:
        """Queue a non-streamed call of another API, its response read as chat by ``as_chat``
        (its shadow offer continues the history read as chat, through chat completions)."""
        try:
            doc = as_chat(response)
            if doc is None:  # not a finished reply (a queued background response): no turn
                return
            if self._monitor.no_reply(doc):  # finished without a reply (failed): counted, no turn
                return
            reply = readable_reply(self._monitor, doc)
            if reply is None:  # no choice, no output message: no reply, no turn, counted (as ``serve``)
                return
            self._monitor.finish(
                cap,
                reply,
                Deferred(describe_response, (self._monitor.names, doc, served_by_response(response))),
                latency_s=time.perf_counter() - t1,
                shadow=self._offer(cap, api=True),
                weight=weigh(self._monitor, cap.request.messages),
            )
        except Exception as exc:
            self._monitor.errors.failed("integration", exc, "could not read a router response")

    def _begin_api(self, kwargs: Mapping[str, Any], api: Api) -> Capture | dict[str, Any] | None:
        """A call's arguments as of the call (``responses_calls.snapshot``), read as chat later
        — on the attribution thread, or when its stream ends — unless something forces a read
        now (trace context, the application's metadata or headers): then its capture.
        ``None`` when it is not monitored. ``api``: the Responses or the Messages API."""
        if self._lean and _KEPT_NOW.isdisjoint(kwargs):
            return snapshot(kwargs)
        try:
            return self._resolve_api(kwargs, api)
        except Exception as exc:  # the parser is total; this guards the plumbing
            self._monitor.errors.failed("integration", exc, "could not start a turn")
            return None

    def _resolve_api(
        self, kwargs: Mapping[str, Any], api: Api, t0: float | None = None, t1: float | None = None
    ) -> Capture | None:
        """A call of ``api`` read as chat messages, captured (``t0``/``t1``: when the call
        began and when it reached the router, for a call read later); ``None`` when it names
        a stored history it cannot be attributed from, or has no input."""
        read = api_messages(kwargs, api, via_litellm=True)
        if read is None:
            return None
        messages, link = read
        request = linked(
            self._parser.router_call(kwargs.get("model"), messages, kwargs, received_at=t0), link
        )
        if t0 is None or t1 is None:
            return self._monitor.capture(request)
        return Capture(request, t1 - t0)

    def _read_api(
        self, kwargs: dict[str, Any], api: Api, response: Any, t0: float, t1: float, t2: float
    ) -> Built | None:
        """A non-streamed call of ``api`` read on the attribution thread (``finish_later``);
        ``None`` when it is not monitored (a stored history it cannot name, no input, not a
        response)."""
        chat = api.as_chat(response)
        if self._monitor.no_reply(chat):  # finished without a reply (failed): counted, no turn
            return None
        reply = readable_reply(self._monitor, chat)
        cap = self._resolve_api(kwargs, api, t0, t1) if reply is not None else None
        if cap is None:
            return None
        outcome = Deferred(describe_response, (self._monitor.names, chat, served_by_response(response)))
        return cap, reply, outcome, t2 - t1, self._offer(cap, api=True)

    def _api_done(
        self,
        ctx: Capture | dict[str, Any] | None,
        kwargs: Mapping[str, Any],
        response: Any,
        t0: float,
        t1: float,
        stream: type[_Stream],
        api: Api,
    ) -> Any:
        """Finish a call of another API (read as chat, so routing and shadow act on it). A
        stream is an event iterator (Responses) or one of raw SSE bytes (Messages: ``SSEFolder``)."""
        if ctx is None:
            return response
        if kwargs.get("stream") and api.as_chat(response) is None:  # a stream, not a response
            folder = SSEFolder(api.folder(MAX_REPLY_CHARS))
            return stream(
                response, lambda out, inner: self._api_stream_done(ctx, api, t0, t1, out, inner), folder
            )
        if isinstance(ctx, dict):  # read on the attribution thread, in order with other turns
            self._monitor.finish_later(
                self._read_api,
                (ctx, api, response, t0, t1, time.perf_counter()),
                weight=weigh_call(self._monitor, ctx),
            )
            return response
        self._finish_as_chat(ctx, response, api.as_chat, t1)
        return response

    def _api_stream_done(
        self, ctx: Capture | dict[str, Any], api: Api, t0: float, t1: float, out: StreamOutcome, inner: Any
    ) -> None:
        """A stream ended: its request read now if it was not at the call."""
        if isinstance(ctx, dict):
            try:
                cap = self._resolve_api(ctx, api, t0, t1)
            except Exception as exc:
                self._monitor.errors.failed("integration", exc, "could not finish a streamed turn")
                return
            if cap is None:
                return
            ctx = cap
        self._stream_done(ctx, t1, out, inner, api=True)

    def _capture(self, model: str, messages: Any, kwargs: Mapping[str, Any]) -> Capture | None:
        try:
            return self._monitor.capture(self._parser.router_call(model, messages, kwargs))
        except Exception as exc:  # the parser is total; this guards the plumbing
            self._monitor.errors.failed("integration", exc, "could not start a turn")
            return None

    def _finish(
        self,
        cap: Capture,
        response: Any,
        latency_s: float,
        tried: tuple[Any, ...] | None,
        request: Mapping[str, Any],
    ) -> None:
        """Queue a non-streamed chat completion (``request``: the call's keyword arguments, which
        its shadow call repeats the generation parameters of)."""
        try:
            reply = readable_reply(self._monitor, response)
            if reply is None:  # no choice (``choices: []``): no reply, no turn, counted (as ``serve``)
                return
            self._monitor.finish(
                cap,
                reply,
                self._outcome(response, tried),
                latency_s=latency_s,
                shadow=self._offer(cap, request=request),
                weight=weigh(self._monitor, cap.request.messages),
            )
        except Exception as exc:
            self._monitor.errors.failed("integration", exc, "could not read a router response")

    def _outcome(self, response: Any, tried: tuple[Any, ...] | None) -> Deferred:
        """Who served a non-streamed completion, read on the attribution thread (``tried``: the
        models a call of the litellm module's own fallbacks tried, ``_tried``)."""
        if tried is None:
            return Deferred(describe_response, (self._monitor.names, response, None))
        return Deferred(_describe_after_fallbacks, (self._monitor.names, response, tried))

    def _lean_finish(
        self,
        model: str,
        messages: list[Any],
        kwargs: dict[str, Any],
        response: Any,
        t0: float,
        t1: float,
        tried: tuple[Any, ...] | None,
    ) -> None:
        """Queue a non-streamed call as it is: the reply text is the one thing taken now (the
        application may edit its response); ``_read_call`` does the rest off the request path."""
        t2 = time.perf_counter()
        try:
            msg = response.choices[0].message
            content = msg.get("content") if type(msg) is dict else msg.content
        except Exception:  # not the usual shape: the whole reply is read later
            content = _UNREAD
        self._monitor.finish_later(
            self._read_call,
            (model, messages, kwargs, response, content, t0, t1, t2, tried),
            weight=weigh(self._monitor, messages),
        )

    def _read_call(
        self,
        model: str,
        messages: list[Any],
        kwargs: dict[str, Any],
        response: Any,
        content: Any,
        t0: float,
        t1: float,
        t2: float,
        tried: tuple[Any, ...] | None,
    ) -> Built | None:
        """What ``_capture`` and ``_finish`` would have taken, on the attribution thread;
        ``None`` for a response with no choice (no reply, no turn)."""
        reply = readable_reply(self._monitor, response)
        if reply is None:
            return None
        request = self._parser.router_call(model, messages, kwargs, received_at=t0)
        if content is not _UNREAD and isinstance(reply, dict) and reply.get("content") is not content:
            reply = {**reply, "content": content}  # the text as returned, not as edited since
        outcome = self._outcome(response, tried)
        cap = Capture(request, t1 - t0)
        return cap, reply, outcome, t2 - t1, self._offer(cap, request=kwargs)

    def _stream_done(
        self,
        cap: Capture,
        t0: float,
        out: StreamOutcome,
        inner: Any,
        api: bool = False,
        tried: tuple[Any, ...] | None = None,
        request: Mapping[str, Any] | None = None,
    ) -> None:
        """A stream ended: its turn queued (``request``: a chat completion's keyword arguments,
        for its shadow call)."""
        try:
            if not self._monitor.stream_recordable(out) or not out.chunks:
                return  # no chunk at all (an error first, closed at once): no reply, no turn
            self._monitor.finish(
                cap,
                out.reply,
                Deferred(self._describe_stream, (out, *self._served_now(out, inner), tried)),
                latency_s=time.perf_counter() - t0,
                streamed=True,
                shadow=self._offer(cap, api, request),
                weight=weigh(self._monitor, cap.request.messages),
            )
        except Exception as exc:
            self._monitor.errors.failed("integration", exc, "could not finish a streamed turn")

    def _offer(
        self, cap: Capture, api: bool = False, request: Mapping[str, Any] | None = None
    ) -> ShadowOffer | None:
        """The turn's shadow offer when the runtime runs shadow continuation (``api``: a call of
        another API, read as chat; ``request``: a chat completion's keyword arguments, the
        wrapper's own dict, which nothing changes after the call: its shadow call repeats their
        generation parameters, ``turns.SHADOW_PARAMS``)."""
        messages = cap.request.messages
        if self._shadow is None or not messages:
            return None
        return offer_of(self._shadow, messages, cap.request.link, api, request)

    def _served_now(self, out: StreamOutcome, inner: Any) -> tuple[ServedBy, dict[str, str | None]]:
        """Who served a stream and each of its deployments' provider model, read as it ends (the
        router has repointed the stream wrapper's ``_hidden_params`` to a fallback deployment by
        then): a deployment given a new model afterwards (``set_model_list``,
        ``upsert_deployment``) must not re-credit a turn the attribution thread reads later. Two
        dictionary lookups a deployment (``_listed_model``)."""
        served = served_by_response(inner)
        ids = out.deployment_ids or ((served.deployment_id,) if served.deployment_id else ())
        return served, {dep: self._deployment_model(dep) for dep in ids}

    def _describe_stream(
        self,
        out: StreamOutcome,
        served: ServedBy,
        models: dict[str, str | None],
        tried: tuple[Any, ...] | None,
    ) -> Outcome:
        """Who served a finished stream (on the attribution thread), from ``_served_now``'s
        reading (``tried``: as for ``_outcome``)."""
        if tried is not None:
            served = after_fallbacks(served, tried)

        def model_of(dep: str) -> str | None:
            return models[dep] if dep in models else self._deployment_model(dep)

        return describe_stream(self._monitor.names, out, served, model_of)

    def _deployment_model(self, deployment_id: str) -> str | None:
        """The provider model string of a router deployment, as the router lists it now (a
        deployment given a new model under its id, by ``set_model_list`` or
        ``upsert_deployment``, is read anew: ``_listed_model``); through ``get_deployment``,
        cached (bounded), for a router that keeps no index of its deployments."""
        listed = _listed_model(self._router, deployment_id)
        if listed is not _UNREAD:
            return listed  # type: ignore[no-any-return]
        if deployment_id in self._dep_names:
            return self._dep_names[deployment_id]
        name: str | None = None
        try:
            dep = self._router.get_deployment(model_id=deployment_id)
            model = getattr(getattr(dep, "litellm_params", None), "model", None)
            name = model if isinstance(model, str) else None
        except Exception:
            name = None
        if len(self._dep_names) < MAX_DEPLOYMENT_NAMES:
            self._dep_names[deployment_id] = name
        return name


def _by_name(call: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """``kwargs`` with ``args``, the positional arguments after ``model`` and ``messages``, under
    the names ``call`` gives those positions (``Router.acompletion``'s ``stream``,
    ``litellm.completion``'s ``timeout``, ``temperature``, ...), so the monitor reads them as
    the router does. ``None`` when they do not fit its signature (too many, a name also given
    by keyword, no signature to read): the call is then made as written, and raises."""
    try:
        params = list(inspect.signature(call).parameters.values())
    except (TypeError, ValueError):
        return None
    taken = params[2 : 2 + len(args)]
    if len(taken) < len(args) or any(
        p.kind is not p.POSITIONAL_OR_KEYWORD or p.name in kwargs for p in taken
    ):
        return None
    return {**kwargs, **{p.name: a for p, a in zip(taken, args, strict=True)}}


def _listed_model(router: Any, deployment_id: str) -> Any:
    """``deployment_id``'s provider model string from a litellm Router's model list, through its
    index of deployment ids (``model_id_to_deployment_index_map``, kept by ``set_model_list``,
    ``upsert_deployment`` and deletions): O(1) and never stale, where ``get_deployment`` builds a
    pydantic ``Deployment`` (about 130 µs). ``None`` for an id not listed; ``_UNREAD`` for a
    router with no such index."""
    index = getattr(router, "model_id_to_deployment_index_map", None)
    if type(index) is not dict:
        return _UNREAD
    try:
        i = index.get(deployment_id)
        if i is None:
            return None
        entry = router.model_list[i]
        params = (
            entry.get("litellm_params") if isinstance(entry, dict) else getattr(entry, "litellm_params", None)
        )
        model = params.get("model") if isinstance(params, dict) else getattr(params, "model", None)
    except Exception:  # a list changing under the read (another thread): the author rule's fallbacks
        return None
    return model if isinstance(model, str) else None


def _tried(model: Any, kwargs: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """The models a call of the litellm module tries, in order, when it names ``fallbacks`` of
    its own (``litellm.completion(model=m, fallbacks=[...])``); copied now (the list is the
    application's). ``None`` without fallbacks."""
    fallbacks = kwargs.get("fallbacks")
    if not fallbacks or not isinstance(fallbacks, (list, tuple)):
        return None
    return (model, *fallbacks)


def _describe_after_fallbacks(names: Any, response: Any, tried: tuple[Any, ...]) -> Outcome:
    """``describe_response`` of a call of the litellm module's own fallbacks (``after_fallbacks``)."""
    return describe_response(names, response, after_fallbacks(served_by_response(response), tried))


def _routing(router: Any, monitor: Monitor, runtime: Runtime | None) -> RouterRouting | None:
    """Risk-aware fallback ordering for this router when the runtime has it enabled."""
    state = runtime.routing if runtime is not None else None
    if state is None:
        return None
    from handoffmon.integrations.router_routing import RouterRouting
    from handoffmon.routing.prefix import PrefixLookup

    return RouterRouting(router, state, PrefixLookup(monitor.attributor), monitor.names)


def _shadow(router: Any, monitor: Monitor, runtime: Runtime | None) -> RouterShadow | None:
    """Shadow calls through this router when the runtime runs shadow continuation."""
    if runtime is None or runtime.shadow is None:
        return None
    from handoffmon.integrations.router_shadow import RouterShadow

    return RouterShadow(router, monitor.names, targets=runtime.shadow.config.targets)
