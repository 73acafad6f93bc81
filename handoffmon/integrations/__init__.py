"""Integrations: ``wrap`` a litellm Router or an OpenAI client; a LiteLLM Proxy callback."""

from __future__ import annotations

import sys
from typing import Any

from handoffmon.config import HandoffmonConfig

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


def _monitor(config: HandoffmonConfig | None) -> Any:
    from handoffmon.config import load_config
    from handoffmon.pipeline.monitor import Monitor

    return Monitor(config if config is not None else load_config())


def wrap(target: Any, config: HandoffmonConfig | None = None, *, monitor: Any = None) -> Any:
    """Put handoffmon around a router or client without changing how it is called.

    Args:
        target: a ``litellm.Router`` (or anything with litellm-style ``completion`` /
            ``acompletion``), or an ``openai.OpenAI`` / ``openai.AsyncOpenAI`` client.
        config: configuration for a new monitor (ignored when ``monitor`` is given);
            ``None`` loads ``$HANDOFFMON_CONFIG`` and ``HANDOFFMON_*`` variables, else defaults.
        monitor: an existing :class:`~handoffmon.pipeline.monitor.Monitor` to record into
            (e.g. one shared by several wrapped clients).

    Returns:
        A wrapper with the target's call surface; its ``monitor`` attribute is the monitor
        (close it — or let process exit close it — to drain the pipeline).

    Raises:
        TypeError: ``target`` is neither a router nor an OpenAI-compatible client.
    """
    if _is_router(target):
        from handoffmon.integrations.router import RouterWrapper

        return RouterWrapper(target, monitor if monitor is not None else _monitor(config))
    if _is_openai_client(target):
        from handoffmon.integrations.openai_client import OpenAIClientWrapper

        return OpenAIClientWrapper(target, monitor if monitor is not None else _monitor(config))
    raise TypeError(
        f"handoffmon.wrap: cannot wrap {type(target).__name__}: expected a litellm.Router "
        "(completion/acompletion) or an OpenAI-compatible client (chat.completions.create)"
    )
