"""The runtime: one object per monitor's life, built from config the same way by every entry point.

``build_runtime`` (store, rules, exporters, monitor, refit schedule) and ``shared_runtime``
(one per Prometheus registry, what ``wrap`` and the LiteLLM Proxy callback use).
"""

from __future__ import annotations

from handoffmon.runtime.build import build_runtime, shared_runtime
from handoffmon.runtime.periodic import PeriodicRefit, RefitStats
from handoffmon.runtime.runtime import Runtime

__all__ = ["PeriodicRefit", "RefitStats", "Runtime", "build_runtime", "shared_runtime"]
