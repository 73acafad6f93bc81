"""handoffmon: turn-level adherence and model-handoff monitoring for multi-turn LLM systems.

Importing this package is cheap: litellm, scipy and the server stack are imported only
where they are used. Public names resolve lazily.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from handoffmon._version import __version__
from handoffmon.config import HandoffmonConfig, load_config
from handoffmon.errors import ConfigError, HandoffmonError

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.integrations import wrap
    from handoffmon.pipeline.monitor import Monitor
    from handoffmon.runtime import Runtime, build_runtime, shared_runtime

__all__ = [
    "ConfigError",
    "HandoffmonConfig",
    "HandoffmonError",
    "Monitor",
    "Runtime",
    "__version__",
    "build_runtime",
    "load_config",
    "shared_runtime",
    "wrap",
]

_LAZY = {
    "Monitor": ("handoffmon.pipeline.monitor", "Monitor"),
    "wrap": ("handoffmon.integrations", "wrap"),
    "Runtime": ("handoffmon.runtime", "Runtime"),
    "build_runtime": ("handoffmon.runtime", "build_runtime"),
    "shared_runtime": ("handoffmon.runtime", "shared_runtime"),
}


def __getattr__(name: str) -> Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'handoffmon' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value
