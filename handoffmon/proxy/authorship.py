"""What the upstream's response says about who wrote the reply: LiteLLM headers, else the body's model."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

MODEL_ID = b"x-litellm-model-id"
MODEL_NAME = b"x-litellm-model-name"
FALLBACKS = b"x-litellm-attempted-fallbacks"
RETRIES = b"x-litellm-attempted-retries"
MODEL_API_BASE = b"x-litellm-model-api-base"
READ_HEADERS = (MODEL_ID, MODEL_NAME, FALLBACKS, RETRIES)
"""Response headers the proxy reads (LiteLLM Proxy sets them; any router may)."""

SESSION_HEADER = b"x-litellm-session-id"
"""LiteLLM's session header: the conversation id when the configured header is absent."""


@dataclass(frozen=True, slots=True)
class UpstreamAuthorship:
    """Authorship facts from one upstream response.

    Attributes:
        model_name: deployment model name (``x-litellm-model-name``), if sent.
        deployment_id: router deployment id (``x-litellm-model-id``), if sent.
        fallbacks: ``x-litellm-attempted-fallbacks`` (0 when absent or malformed).
        retries: ``x-litellm-attempted-retries`` (0 when absent or malformed).
    """

    model_name: str | None = None
    deployment_id: str | None = None
    fallbacks: int = 0
    retries: int = 0

    def authors(self, body_model: str | None, canonical: Mapping[str, str]) -> list[str]:
        """Raw author names for ``Monitor.finish``, most specific first.

        The deployment id wins when the operator mapped it in
        ``attribution.canonical_models``; otherwise the deployment's model name, then
        the ``model`` the response body reports.
        """
        if self.deployment_id and self.deployment_id in canonical:
            return [self.deployment_id]
        name = self.model_name or body_model
        return [name] if name else []


def _count(raw: bytes | None) -> int:
    try:
        return max(0, int(raw)) if raw else 0
    except ValueError:
        return 0


def from_headers(raw: Iterable[tuple[bytes, bytes]]) -> UpstreamAuthorship:
    """Read the authorship headers from raw (lower- or mixed-case) response headers."""
    found: dict[bytes, bytes] = {}
    for k, v in raw:
        if k[:10].lower() == b"x-litellm-":
            key = k.lower()
            if key in READ_HEADERS:
                found[key] = v
    name, dep = found.get(MODEL_NAME), found.get(MODEL_ID)
    return UpstreamAuthorship(
        model_name=name.decode("latin-1") if name else None,
        deployment_id=dep.decode("latin-1") if dep else None,
        fallbacks=_count(found.get(FALLBACKS)),
        retries=_count(found.get(RETRIES)),
    )


def usage_tokens(usage: Any) -> tuple[int | None, int | None]:
    """``(prompt_tokens, completion_tokens)`` from an OpenAI ``usage`` object, if present."""
    if not isinstance(usage, dict):
        return None, None
    p, c = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (p if isinstance(p, int) else None, c if isinstance(c, int) else None)
