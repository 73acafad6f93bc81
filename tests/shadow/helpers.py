"""A runtime running shadow continuation on every eligible turn, for the integration tests."""

from __future__ import annotations

from typing import Any

from handoffmon import build_runtime
from handoffmon.config import config_from_mapping
from handoffmon.runtime import Runtime


def shadow_runtime(
    rules: list[dict[str, Any]],
    target: str,
    candidates: dict[str, list[str]],
    canonical: dict[str, str] | None = None,
) -> Runtime:
    """Shadow on, every eligible turn sampled, no money cap (the mocks have no prices), one
    allowed ``target``; its series in a private registry."""
    config = config_from_mapping(
        {
            "rules": rules,
            "attribution": {"canonical_models": canonical or {}},
            "telemetry": {"log_turns": False},
            "refit": {"interval_s": 0},
            "shadow": {
                "enabled": True,
                "sample_rate": 1.0,
                "usd_per_day": None,
                "targets": [target],
                "candidates": candidates,
            },
        }
    )
    return build_runtime(config, registry=None)


def record_completions(monkeypatch: Any) -> list[dict[str, Any]]:
    """The keyword arguments of every ``litellm.completion`` call from now on (a shadow call to a
    Router deployment is one; a Router's own ``acompletion`` is not), which still runs."""
    import litellm

    seen: list[dict[str, Any]] = []
    real = litellm.completion

    def record(**kwargs: Any) -> Any:
        seen.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(litellm, "completion", record)
    return seen
