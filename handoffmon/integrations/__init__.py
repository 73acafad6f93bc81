"""Integrations: ``wrap`` a litellm Router, an OpenAI or Anthropic client; a LiteLLM Proxy callback."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from handoffmon.config import HandoffmonConfig

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.runtime import Runtime

__all__ = ["wrap"]


def _is_router(target: Any) -> bool:
    litellm = sys.modules.get("litellm")
    router_cls = getattr(litellm, "Router", None) if litellm is not None else None
    if router_cls is not None and isinstance(target, router_cls):
        return True
    return callable(getattr(target, "completion", None)) and callable(getattr(target, "acompletion", None))


def _is_openai_client(target: Any) -> bool:
    completions = getattr(getattr(target, "chat", None), "completions", None)
    return callable(getattr(completions, "create", None))


def _is_anthropic_client(target: Any) -> bool:
    return callable(getattr(getattr(target, "messages", None), "create", None))


def wrap(target: Any, config: HandoffmonConfig | None = None, *, runtime: Runtime | None = None) -> Any:
    """Put handoffmon around a router or client without changing how it is called.

    With no ``runtime``, the wrapper records into the process's shared runtime
    (``handoffmon.shared_runtime``): built from ``config`` on first use, it registers
    handoffmon's series in prometheus_client's global registry (so the application's
    ``/metrics`` shows them), serves them on ``telemetry.metrics_port`` when set, runs the
    periodic refit, and drains at exit. Wrapping several routers or clients with the same
    config shares that runtime.

    Args:
        target: a ``litellm.Router`` (or anything with litellm-style ``completion`` /
            ``acompletion``: the ``litellm`` module itself), an ``openai.OpenAI`` /
            ``openai.AsyncOpenAI`` client, or an ``anthropic.Anthropic`` /
            ``anthropic.AsyncAnthropic`` client.
        config: configuration for the shared runtime; ``None`` loads
            ``$HANDOFFMON_CONFIG`` and ``HANDOFFMON_*`` variables, else defaults.
        runtime: record into this runtime instead (``handoffmon.build_runtime(...)``).

    Returns:
        A wrapper with the target's call surface; ``.runtime`` and ``.monitor`` on it. A
        target that is already a handoffmon wrapper is returned as is when it records into
        that runtime, else its router or client is wrapped for the new one: calls are never
        monitored twice.

    Raises:
        TypeError: ``target`` is neither a router nor an OpenAI-compatible or Anthropic client.
        ValueError: both ``config`` and ``runtime`` were given.
        ConfigError: the config is unusable, or another config already owns the registry.
    """
    if config is not None and runtime is not None:
        raise ValueError("handoffmon.wrap: pass config= or runtime=, not both")
    inner = _wrapped(target)
    if inner is not None:  # one layer of monitoring, never two (each call would count twice)
        rt = runtime if runtime is not None else _shared(config)
        if target.monitor is rt.monitor:
            return target
        target = inner
    if _is_router(target):
        from handoffmon.integrations.router import RouterWrapper

        rt = runtime if runtime is not None else _shared(config)
        return RouterWrapper(target, rt.monitor, runtime=rt)
    if _is_openai_client(target):
        from handoffmon.integrations.openai_client import OpenAIClientWrapper

        rt = runtime if runtime is not None else _shared(config)
        return OpenAIClientWrapper(target, rt.monitor, runtime=rt)
    if _is_anthropic_client(target):
        from handoffmon.integrations.anthropic_client import AnthropicClientWrapper

        rt = runtime if runtime is not None else _shared(config)
        return AnthropicClientWrapper(target, rt.monitor, runtime=rt)
    raise TypeError(
        f"handoffmon.wrap: cannot wrap {type(target).__name__}: expected a litellm.Router "
        "(completion/acompletion), an OpenAI-compatible client (chat.completions.create) or an "
        "Anthropic client (messages.create)"
    )


def _wrapped(target: Any) -> Any:
    """The router or client inside ``target`` when it is already one of handoffmon's wrappers
    (``None`` otherwise). A wrapper's module is loaded before any wrapper exists, so an
    unloaded one means ``target`` is not its instance."""
    for module, name, attr in (
        ("handoffmon.integrations.router", "RouterWrapper", "router"),
        ("handoffmon.integrations.openai_client", "ClientWrapper", "client"),
    ):
        cls = getattr(sys.modules.get(module), name, None)
        if cls is not None and isinstance(target, cls):
            return getattr(target, attr)
    return None


def _shared(config: HandoffmonConfig | None) -> Runtime:
    from handoffmon.runtime import shared_runtime

    return shared_runtime(config)
