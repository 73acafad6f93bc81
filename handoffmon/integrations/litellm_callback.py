"""LiteLLM Proxy callback: register ``handoffmon.integrations.litellm_callback.handoffmon_callback``.

In the proxy's ``config.yaml``::

    litellm_settings:
      callbacks: ["handoffmon.integrations.litellm_callback.handoffmon_callback"]

and point ``HANDOFFMON_CONFIG`` at a handoffmon config file (optional). The proxy
imports this module by name and uses the module-level instance, which builds the
process's shared :class:`~handoffmon.runtime.Runtime` on first use.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import TYPE_CHECKING, Any

from handoffmon._extras import requires_extra

with requires_extra("litellm", "the LiteLLM Proxy callback"):
    from litellm.integrations.custom_logger import CustomLogger

from handoffmon.config import HandoffmonConfig
from handoffmon.ingress import (
    ChunkFolder,
    RequestParser,
    StreamOutcome,
    describe_response,
    describe_stream,
    served_by_response,
)
from handoffmon.ingress.apis import MESSAGES, RESPONSES, Api
from handoffmon.ingress.chunks import MAX_REPLY_CHARS, Folder
from handoffmon.ingress.fields import get
from handoffmon.ingress.served import Outcome, ServedBy
from handoffmon.ingress.sse import SSEFolder
from handoffmon.integrations.held import weigh
from handoffmon.integrations.responses_calls import api_messages, linked, readable_reply
from handoffmon.pipeline.monitor import Monitor
from handoffmon.pipeline.records import Capture, Deferred
from handoffmon.shadow.turns import ShadowOffer, offer_of, request_params

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.integrations.router_routing import RouterRouting
    from handoffmon.integrations.router_shadow import RouterShadow
    from handoffmon.runtime import Runtime

_log = logging.getLogger("handoffmon.integrations")

MAX_IN_FLIGHT = 100_000
"""Bound on remembered call start times (entries of calls that failed are evicted oldest first)."""

RUNTIME_RETRY_S = 60.0
"""After the runtime could not be built (a config that does not load), the proxy's calls pass
through unmonitored for this long before the next attempt, which is logged again if it fails."""


class HandoffmonCallback(CustomLogger):  # type: ignore[misc]
    """Monitors every chat completion and Responses API call a LiteLLM Proxy serves (the
    latter read as chat by ``ingress.responses``, calls continuing a stored response or a
    ``conversation`` object included).

    Non-streamed replies are handled in ``async_post_call_success_hook`` and streamed ones
    in ``async_post_call_streaming_iterator_hook`` (chunks pass through unchanged; the
    turn is finished when the stream ends or is cut off). Both run before the client has
    the whole reply, so the next turn of the conversation can always attribute it.

    With ``shadow.enabled`` each finished turn is offered for shadow continuation through
    the proxy's own router (``RouterShadow``: fallbacks and retries off), on the runtime's
    shadow threads; those calls bypass the proxy's hooks, so they are never turns.

    Args:
        config: configuration; ``None`` loads ``$HANDOFFMON_CONFIG`` (and ``HANDOFFMON_*``
            env) when the runtime is first needed.
        runtime: record into this runtime instead of the process's shared one.
        clock: monotonic seconds, for the retry of a runtime that could not be built.
    """

    def __init__(
        self,
        config: HandoffmonConfig | None = None,
        *,
        runtime: Runtime | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._config = config
        self._runtime = runtime
        self._clock = clock
        self._retry_at = float("-inf")  # no runtime before then: the last attempt failed
        self._lock = threading.Lock()
        self._parser: RequestParser | None = None
        self._starts: OrderedDict[str, float] = OrderedDict()  # litellm_call_id -> monotonic start
        self._routing: RouterRouting | None = None
        self._shadow: RouterShadow | None = None
        self._proxied = False  # the proxy's pre-call hook has run: this process is a proxy
        self._told_sdk = False

    @property
    def runtime(self) -> Runtime:
        """The runtime, built on first use: ``shared_runtime(config)``.

        Shared with any ``wrap`` in the same process; its series go to prometheus_client's
        global registry, which LiteLLM's own ``/metrics`` serves when its ``prometheus``
        callback is on (else set ``telemetry.metrics_port``), and its periodic refit runs
        in the proxy process.
        """
        rt = self._runtime
        if rt is None:
            with self._lock:
                if self._runtime is None:
                    from handoffmon.runtime import shared_runtime

                    self._runtime = shared_runtime(self._config)
                rt = self._runtime
        return rt

    @property
    def monitor(self) -> Monitor:
        """The runtime's monitor."""
        return self.runtime.monitor

    def _available(self) -> Runtime | None:
        """The runtime for a hook; ``None`` while it cannot be built. A failed build (a config
        that does not load: the error names the file and key) is logged once at ERROR and
        tried again after ``RUNTIME_RETRY_S``, not on every request: the calls meanwhile pass
        through unmonitored, and neither re-read the config nor log a traceback each."""
        rt = self._runtime
        if rt is not None:
            return rt
        now = self._clock()
        if now < self._retry_at:
            return None
        try:
            return self.runtime
        except Exception as exc:
            self._retry_at = now + RUNTIME_RETRY_S
            _log.error(
                "handoffmon could not build its runtime, so this proxy's calls are not monitored "
                "(tried again in %.0f s): %s",
                RUNTIME_RETRY_S,
                exc,
            )
            return None

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: Any
    ) -> None:
        """Note when the proxy started the call (for the turn's latency); with ``routing``
        enabled, reorder a chat request's fallbacks in ``data`` (the proxy passes it on to its
        router). Nothing else is changed."""
        self._proxied = True
        call_id = data.get("litellm_call_id")
        if isinstance(call_id, str) and _may_be_turn(data, call_type):
            self._starts[call_id] = time.monotonic()
            while len(self._starts) > MAX_IN_FLIGHT:  # calls that never finished
                self._starts.popitem(last=False)
        if (
            type(data.get("model")) is str
            and call_type != "anthropic_messages"
            and not _is_messages_route(data)
        ):
            if isinstance(data.get("messages"), list):
                self._route(data)
            elif call_type in ("aresponses", "responses"):  # the Responses API: read as chat
                self._route(data, RESPONSES)

    async def async_post_call_failure_hook(
        self,
        request_data: dict[str, Any],
        original_exception: Exception,
        user_api_key_dict: Any,
        traceback_str: str | None = None,
    ) -> None:
        """A call failed: no turn, so its start is dropped (``_starts`` holds calls in flight only)."""
        call_id = request_data.get("litellm_call_id") if isinstance(request_data, Mapping) else None
        if isinstance(call_id, str):
            self._starts.pop(call_id, None)

    def log_success_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
        """LiteLLM's logging hook (sync calls): see :meth:`_outside_proxy`."""
        self._outside_proxy(kwargs)

    async def async_log_success_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        """LiteLLM's logging hook (async calls): see :meth:`_outside_proxy`."""
        self._outside_proxy(kwargs)

    def _outside_proxy(self, kwargs: Any) -> None:
        """Registered in ``litellm.callbacks`` of a process that is not a LiteLLM Proxy, the
        callback sees the SDK's calls only through the logging hooks, and records nothing:
        its turns come from the proxy's hooks. Say so once, naming what does monitor the
        SDK. A call the proxy serves carries its request (``proxy_server_request``); calls a
        proxy makes itself (shadow calls, health checks) come after its pre-call hook ran, or
        in a process that loaded the proxy's server module."""
        if self._told_sdk or self._proxied:
            return
        params = kwargs.get("litellm_params") if isinstance(kwargs, Mapping) else None
        if isinstance(params, Mapping) and params.get("proxy_server_request"):
            return
        if "litellm.proxy.proxy_server" in sys.modules:
            return
        self._told_sdk = True
        _log.warning(
            "handoffmon_callback monitors the calls a LiteLLM Proxy serves; this LiteLLM SDK "
            "call is not monitored. To monitor the SDK, call it through handoffmon.wrap(litellm) "
            "(or handoffmon.wrap(router) for a Router)."
        )

    def _route(self, data: dict[str, Any], api: Api | None = None) -> None:
        """Risk-aware fallback order for one proxy request (``RouterRouting.apply_body``); ``api``:
        a call of another API, its history read as chat."""
        try:
            rt = self._available()
            state = rt.routing if rt is not None else None
            if state is None:
                return
            messages, link = None, None
            if api is not None:
                read = api_messages(data, api, via_litellm=True)
                if read is None:
                    return
                messages, link = read
            router = _proxy_router()
            if router is None:  # not inside a running proxy: nothing to read candidates from
                return
            adapter = self._routing
            if adapter is None or adapter.router is not router:  # first call, or the proxy reloaded
                from handoffmon.integrations.router_routing import RouterRouting
                from handoffmon.routing.prefix import PrefixLookup

                monitor = self.monitor
                adapter = RouterRouting(router, state, PrefixLookup(monitor.attributor), monitor.names)
                self._routing = adapter
            adapter.apply_body(data, messages, link)
        except Exception:
            _log.warning("handoffmon routing could not run in the proxy", exc_info=True)
            rt = self._runtime  # None when building it failed: nothing to count into
            if rt is not None:
                rt.monitor.count_error("integration")

    def _offer(self, cap: Capture, data: Mapping[str, Any], api: bool = False) -> ShadowOffer | None:
        """The turn's shadow offer: through the proxy's router, when the runtime runs shadow
        continuation (``api``: a Responses or Messages API call, read as chat).

        ``data``: the request as the proxy hands it to its hooks — the client's body, its
        generation parameters (``temperature``, ``response_format``, ``max_tokens``, ...) at the
        top level, where the proxy's router reads them, beside the keys the proxy adds (metadata,
        credentials, ids). The shadow call repeats those parameters (``offer_of``'s ``request``):
        a copy of them only, taken now, since the proxy goes on using ``data``."""
        messages = cap.request.messages
        if self.runtime.shadow is None or not messages:
            return None
        router = _proxy_router()
        if router is None:  # not inside a running proxy: no router to ask
            return None
        source = self._shadow
        if source is None or source.router is not router:  # first turn, or the proxy reloaded
            from handoffmon.integrations.router_shadow import RouterShadow

            targets = self.runtime.shadow.config.targets
            source = self._shadow = RouterShadow(router, self.monitor.names, targets=targets)
        return offer_of(source, messages, cap.request.link, api, request=request_params(data))

    def _latency(self, data: Mapping[str, Any]) -> float | None:
        call_id = data.get("litellm_call_id")
        start = self._starts.pop(call_id, None) if isinstance(call_id, str) else None
        return None if start is None else time.monotonic() - start

    def _begin(self, data: Mapping[str, Any], api: Api | None = None) -> Capture | None:
        """The call's capture; ``api``: a call of another API, its request read as chat
        (``ingress.apis``)."""
        try:
            rt = self._available()
            if rt is None:  # no runtime (logged by ``_available``): the call passes unmonitored
                return None
            monitor = rt.monitor
            if self._parser is None:
                self._parser = RequestParser.from_config(monitor.config)
            link = None
            if api is not None:
                read = api_messages(data, api, via_litellm=True)
                if read is None:  # no input, or a stored history it cannot name: not monitored
                    return None
                messages, link = read
                data = {**data, "messages": messages}
            request = self._parser.litellm_proxy(data)
            return (
                None if request is None else monitor.capture(linked(request, link))
            )  # None: not a chat call
        except Exception as exc:
            rt = self._runtime  # None when building it failed: logged by ``_available``
            if rt is not None:
                rt.monitor.errors.failed("integration", exc, "could not start a proxy turn")
            return None

    async def async_post_call_success_hook(
        self, data: dict[str, Any], user_api_key_dict: Any, response: Any
    ) -> Any:
        """A non-streamed chat completion (or Responses or Messages API call) finished: queue
        it for attribution and checks."""
        latency = self._latency(data)  # pops the start on every path, turn or not
        try:
            api = RESPONSES if _is_response(response) else MESSAGES if _is_message(response) else None
        except Exception as exc:  # a response that cannot even say what it is: not ours to read
            rt = self._runtime
            if rt is not None:
                rt.monitor.errors.failed("integration", exc, "could not read a proxy response")
            return None
        cap = self._begin(data, api)
        if cap is None:
            return None
        try:
            doc, served = (
                (response, None) if api is None else (api.as_chat(response), _served(response, data))
            )
            monitor = self.monitor
            if monitor.no_reply(doc):  # finished without a reply (failed): counted, no turn
                return None
            reply = readable_reply(monitor, doc)
            if reply is None:  # nothing to read: no turn, counted (as ``serve``)
                return None
            monitor.finish(
                cap,
                reply,
                Deferred(_describe_proxy_response, (monitor.names, doc, served)),
                latency_s=latency,
                shadow=self._offer(cap, data, api is not None),
                weight=weigh(monitor, cap.request.messages),
            )
        except Exception as exc:
            self.monitor.errors.failed("integration", exc, "could not read a proxy response")
        return None

    async def async_post_call_streaming_iterator_hook(
        self, user_api_key_dict: Any, response: Any, request_data: dict[str, Any]
    ) -> AsyncGenerator[Any, None]:
        """Pass a streamed reply through unchanged; finish the turn when it ends or is cut off.

        A request without ``messages`` is a Responses API call when its first event is one
        (``response.*``): its turn begins there, folded by ``ResponsesStreamFolder``. A call to
        the proxy's ``/v1/messages`` is an Anthropic Messages API call, whose stream the proxy
        hands over as raw SSE bytes: framed by ``SSEChunks``, folded by ``MessagesStreamFolder``."""
        messages_api = _is_messages_route(request_data)
        chat = isinstance(request_data.get("messages"), list) and not messages_api
        cap = self._begin(request_data, MESSAGES if messages_api else None) if chat or messages_api else None
        folder: Folder | None = (
            ChunkFolder() if chat else SSEFolder(MESSAGES.folder(MAX_REPLY_CHARS)) if messages_api else None
        )
        completed = False
        try:
            async for chunk in response:
                if folder is None:
                    folder = RESPONSES.folder(MAX_REPLY_CHARS)
                    cap = self._begin_stream(request_data, chunk)
                folder.feed(chunk)  # total: never raises into the stream
                yield chunk
            completed = True
        except BaseException as exc:
            if folder is not None:
                folder.raised(exc)  # the folder's verdict (an upstream error: no reply), as the wrappers'
            raise
        finally:
            latency = self._latency(request_data)  # pops the start on every path, turn or not
            if cap is not None and folder is not None:
                try:
                    out = folder.outcome(completed=completed)
                except Exception as exc:  # never into the proxy's response: counted, no turn
                    self.monitor.errors.failed("integration", exc, "could not read a proxy stream")
                else:
                    self._stream_done(cap, request_data, response, out, latency, not chat)

    def _begin_stream(self, data: Mapping[str, Any], first: Any) -> Capture | None:
        """The capture of a stream whose request has no ``messages``: a Responses API call when
        its first event is one (``response.*``), else nothing to monitor. Never raises."""
        try:
            kind = get(first, "type")
        except Exception:  # an event object that cannot even say its type: not ours to read
            return None
        if isinstance(kind, str) and kind.startswith("response."):
            return self._begin(data, RESPONSES)
        return None

    def _stream_done(
        self,
        cap: Capture,
        data: Mapping[str, Any],
        stream: Any,
        out: StreamOutcome,
        latency: float | None,
        api: bool = False,
    ) -> None:
        try:
            monitor = self.monitor
            if not monitor.stream_recordable(out) or not out.chunks:
                return  # no reply (counted), or no chunk at all (the client gone before the first)
            monitor.finish(
                cap,
                out.reply,
                Deferred(_describe_proxy_stream, (monitor.names, out, _served(stream, data), api)),
                latency_s=latency,
                streamed=True,
                shadow=self._offer(cap, data, api),
                weight=weigh(monitor, cap.request.messages),
            )
        except Exception as exc:
            self.monitor.errors.failed("integration", exc, "could not finish a proxy stream")


def _may_be_turn(data: Mapping[str, Any], call_type: Any) -> bool:
    """A call that may become a turn (chat completions, the Responses and Messages APIs): only
    these note a start, so embeddings and other calls leave nothing behind."""
    return (
        isinstance(data.get("messages"), list)
        or call_type in ("aresponses", "responses", "anthropic_messages")
        or _is_messages_route(data)
    )


def _describe_proxy_response(names: Any, doc: Any, served: ServedBy | None) -> Outcome:
    """``describe_response`` of a non-streamed proxy reply (attribution thread). A Responses or
    Messages reply whose hidden parameters name the deployment but not its model gets the
    model from the proxy's router, as a stream's does (``describe_stream``'s ``model_of``):
    one deployment, one author, whichever way it answered."""
    if served is not None and served.deployment_id and served.model_name is None:
        model = _deployment_model(served.deployment_id)
        if model is not None:
            served = served._replace(model_name=model)
    return describe_response(names, doc, served)


def _describe_proxy_stream(names: Any, out: StreamOutcome, served: ServedBy, api: bool) -> Outcome:
    """``describe_stream`` of a proxy stream (attribution thread). A Responses API stream's id
    is the one LiteLLM's ``ResponsesIDSecurity`` hook encrypted for the client (it runs before
    this callback's streaming hook); the proxy decrypts ``previous_response_id`` before the next
    call's hooks see it, so the reply is recorded under the decrypted id, as a non-streamed
    reply is (whose hook runs first)."""
    if api and out.response_id:
        out = out._replace(response_id=_decrypted_response_id(out.response_id))
    return describe_stream(names, out, served, _deployment_model)


def _decrypted_response_id(response_id: str) -> str:
    """The id behind a response id LiteLLM encrypted (itself when not encrypted, or when the
    installed LiteLLM has no such hook).

    Only a running proxy encrypts ids (its ``ResponsesIDSecurity`` hook), and LiteLLM's
    decryption reads the key from ``litellm.proxy.proxy_server``: in a process that has not
    loaded that module (the hooks called in-process, a test) no id was encrypted, and importing
    it here, on the attribution thread, would load the whole proxy server (5-9 s on an idle
    core, over 20 s under load) before this turn or any queued behind it is recorded."""
    if "litellm.proxy.proxy_server" not in sys.modules:
        return response_id
    try:
        from litellm.proxy.hooks.responses_id_security import decrypted_response_id
    except ImportError:
        return response_id
    try:
        plain = decrypted_response_id(response_id)
    except Exception:
        return response_id
    return plain if isinstance(plain, str) and plain else response_id


def _is_response(response: Any) -> bool:
    """A Responses API response (``object == "response"`` with an ``output`` list)."""
    return get(response, "object") == "response" and isinstance(get(response, "output"), (list, tuple))


def _is_message(response: Any) -> bool:
    """An Anthropic Messages API response (``type == "message"`` with a ``content`` list)."""
    return get(response, "type") == "message" and isinstance(get(response, "content"), (list, tuple))


def _is_messages_route(data: Mapping[str, Any]) -> bool:
    """The proxy received the call on its Anthropic Messages route (``/v1/messages``)."""
    url = get(data.get("proxy_server_request"), "url")
    return isinstance(url, str) and url.split("?", 1)[0].rstrip("/").endswith("/v1/messages")


def _served(response: Any, data: Mapping[str, Any]) -> ServedBy:
    """Who served a call: the response's hidden parameters, else (an Anthropic Messages reply
    is a plain dict, its stream raw bytes) the deployment the proxy put in ``data``."""
    served = served_by_response(response)
    if served.deployment_id:
        return served
    dep = data.get("deployment")
    info, params = get(dep, "model_info"), get(dep, "litellm_params")
    dep_id, model, group = get(info, "id"), get(params, "model"), get(dep, "model_name")
    return served._replace(
        deployment_id=dep_id if isinstance(dep_id, str) else None,
        model_name=model if isinstance(model, str) else served.model_name,
        model_group=group if isinstance(group, str) else served.model_group,
    )


def _proxy_router() -> Any:
    """The running proxy's ``litellm.Router`` (``None`` outside a proxy or before it loaded its config)."""
    server = sys.modules.get("litellm.proxy.proxy_server")  # only inside a running proxy
    return getattr(server, "llm_router", None)


def _deployment_model(deployment_id: str) -> str | None:
    """Provider model string of a proxy deployment (the proxy's router), if it can be found."""
    llm_router = _proxy_router()
    if llm_router is None:
        return None
    try:
        dep = llm_router.get_deployment(model_id=deployment_id)
    except Exception:
        return None
    model = getattr(getattr(dep, "litellm_params", None), "model", None)
    return model if isinstance(model, str) else None


handoffmon_callback = HandoffmonCallback()
"""The instance LiteLLM Proxy's ``config.yaml`` names (``callbacks: [...handoffmon_callback]``)."""
