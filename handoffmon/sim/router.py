"""A real ``litellm.Router`` over the simulated fleet: one group per model, fallbacks between groups."""

from __future__ import annotations

import secrets
from typing import Any

from handoffmon._extras import requires_extra

with requires_extra("demo", "the simulated fleet"):
    import litellm
    from litellm.router import Router

from handoffmon.sim.fleet import Fleet
from handoffmon.sim.provider import SimProvider


def register_provider(provider: SimProvider, name: str | None = None) -> str:
    """Add the provider to litellm's custom provider map under a fresh name; return the name.

    litellm keeps custom providers in a module-level list (its design, not ours); a
    unique name per provider lets several simulated fleets live in one process.
    """
    name = name or f"handoffsim{secrets.token_hex(4)}"
    litellm.custom_provider_map = [
        *[p for p in litellm.custom_provider_map if p.get("provider") != name],
        {"provider": name, "custom_handler": provider},
    ]
    provider.provider_name = name
    return name


def unregister_provider(name: str) -> None:
    """Remove a provider added by ``register_provider``."""
    litellm.custom_provider_map = [p for p in litellm.custom_provider_map if p.get("provider") != name]


_ZERO_PRICES = {
    "input_cost_per_token": 0.0,
    "output_cost_per_token": 0.0,
    "cache_creation_input_token_cost": 0.0,
    "cache_read_input_token_cost": 0.0,
}
"""Explicit zero prices: without them litellm searches its whole cost map on every call."""


def model_list(fleet: Fleet, provider_name: str) -> list[dict[str, Any]]:
    """Router deployments: group ``m.group`` served by ``provider_name/m.name`` with id ``m.name``."""
    return [
        {
            "model_name": m.group,
            "litellm_params": {"model": f"{provider_name}/{m.name}"},
            "model_info": {"id": m.name, **_ZERO_PRICES},
        }
        for m in fleet.models
    ]


def canonical_models(fleet: Fleet, provider_name: str) -> dict[str, str]:
    """``attribution.canonical_models`` entries: ``provider_name/model`` → ``model``."""
    return {f"{provider_name}/{m.name}": m.name for m in fleet.models}


def build_router(
    fleet: Fleet,
    provider: SimProvider,
    *,
    provider_name: str | None = None,
    num_retries: int = 0,
    **router_kwargs: Any,
) -> Router:
    """A ``litellm.Router`` with one deployment per model and the fleet's fallbacks.

    Retries default to 0 so that an injected failure goes straight to the fallback
    group (litellm's retry back-off would otherwise sleep); cooldowns are disabled so
    a run does not depend on wall-clock timing.

    Args:
        fleet: models, groups and fallbacks.
        provider: the ``SimProvider`` serving the fleet (registered with litellm here).
        provider_name: litellm provider prefix (default: a fresh unique name).
        num_retries: router retries per group before falling back.
        router_kwargs: passed to ``litellm.Router`` (override any default above).
    """
    name = register_provider(provider, provider_name)
    kwargs: dict[str, Any] = {
        "model_list": model_list(fleet, name),
        "fallbacks": [{g: list(fb)} for g, fb in fleet.fallbacks.items() if fb],
        "num_retries": num_retries,
        "disable_cooldowns": True,
    }
    kwargs.update(router_kwargs)
    return Router(**kwargs)
