"""Model prices from litellm's cost map, when litellm is installed (``serve`` runs without it).

One lookup shared by the shadow budget's adapters (the wrapped Router, the OpenAI client,
``serve``): the layers keep ``integrations`` and ``proxy`` apart, so it lives below both.
litellm is imported on the first call only, never by ``import handoffmon``.
"""

from __future__ import annotations


def cost_map_prices(model: str) -> tuple[float, float] | None:
    """(input, output) USD per token of ``model`` in litellm's cost map (``None``: unknown, or no litellm)."""
    try:
        import litellm
    except ImportError:
        return None
    entry = litellm.model_cost.get(model) or {}
    inp, out = entry.get("input_cost_per_token"), entry.get("output_cost_per_token")
    if not isinstance(inp, (int, float)) or not isinstance(out, (int, float)):
        return None
    return float(inp), float(out)
