"""Real litellm Routers for the integration tests: a failing primary with a fallback, spies on calls."""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

RATE_LIMITED = "litellm.RateLimitError"
"""A ``mock_response`` that makes litellm raise a RateLimitError (which triggers fallbacks)."""
BACKUP_REPLY = "the backup deployment answers with this long reply"
ALPHA_REPLY = "ok"

CANONICAL = {"openai/gpt-b": "model-b", "dep-c": "model-c"}
"""Backup canonicalized by its provider model name, alpha by its deployment id."""


def fallback_router() -> Any:
    """``primary`` always rate-limits and falls back to ``backup``; ``alpha`` answers directly."""
    from litellm import Router

    return Router(
        model_list=[
            {
                "model_name": "primary",
                "litellm_params": {"model": "openai/gpt-a", "api_key": "k", "mock_response": RATE_LIMITED},
                "model_info": {"id": "dep-a"},
            },
            {
                "model_name": "backup",
                "litellm_params": {"model": "openai/gpt-b", "api_key": "k", "mock_response": BACKUP_REPLY},
                "model_info": {"id": "dep-b"},
            },
            {
                "model_name": "alpha",
                "litellm_params": {"model": "openai/gpt-c", "api_key": "k", "mock_response": ALPHA_REPLY},
                "model_info": {"id": "dep-c"},
            },
        ],
        fallbacks=[{"primary": ["backup"]}],
        num_retries=0,
    )


class _RecordingStream:
    """Forwards a stream and remembers every chunk it yielded (sync and async)."""

    def __init__(self, inner: Any, chunks: list[Any]) -> None:
        self._inner = inner
        self._chunks = chunks

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> Any:
        chunk = next(self._inner)
        self._chunks.append(chunk)
        return chunk

    def __aiter__(self) -> Any:
        return self

    async def __anext__(self) -> Any:
        chunk = await self._inner.__anext__()
        self._chunks.append(chunk)
        return chunk


class Spy:
    """Replaces a router's completion/acompletion with recorders of what the router returned."""

    def __init__(self, router: Any) -> None:
        self.returned: list[Any] = []
        self.chunks: list[Any] = []
        sync, asyn = router.completion, router.acompletion

        def completion(*args: Any, **kwargs: Any) -> Any:
            return self._keep(sync(*args, **kwargs), kwargs)

        async def acompletion(*args: Any, **kwargs: Any) -> Any:
            return self._keep(await asyn(*args, **kwargs), kwargs)

        router.completion, router.acompletion = completion, acompletion

    def _keep(self, response: Any, kwargs: dict[str, Any]) -> Any:
        if kwargs.get("stream"):
            response = _RecordingStream(response, self.chunks)
        self.returned.append(response)
        return response


def responses_router(api_base: str) -> Any:
    """A Router of three OpenAI deployments on a Responses upstream at ``api_base``
    (``tests/proxy/responses_upstream.py``): ``primary`` (dep-a) answers 429 and falls back to
    ``backup`` (dep-b, ``openai/gpt-b``); ``alpha`` (dep-c) answers directly."""
    from litellm import Router

    def deployment(group: str, model: str, dep: str, **extra: Any) -> dict[str, Any]:
        params = {"model": model, "api_key": "k", "api_base": api_base, **extra}
        return {"model_name": group, "litellm_params": params, "model_info": {"id": dep}}

    return Router(
        model_list=[
            deployment("primary", "openai/gpt-a", "dep-a", extra_headers={"x-mock-status": "429"}),
            deployment("backup", "openai/gpt-b", "dep-b", extra_headers={"x-mock-model": "gpt-b"}),
            deployment("alpha", "openai/gpt-c", "dep-c", extra_headers={"x-mock-model": "gpt-c"}),
        ],
        fallbacks=[{"primary": ["backup"]}],
        num_retries=0,
    )
