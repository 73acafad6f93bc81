"""A zero-latency router with litellm's call surface and response shape (for load and overhead runs)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


class _Message:
    __slots__ = ("content", "role", "tool_calls")

    def __init__(self, content: str) -> None:
        self.role = "assistant"
        self.content = content
        self.tool_calls = None


class _Choice:
    __slots__ = ("finish_reason", "index", "message")

    def __init__(self, content: str) -> None:
        self.index = 0
        self.message = _Message(content)
        self.finish_reason = "stop"


class ZeroResponse:
    """What litellm returns, minus the cost: ``choices[0].message``, ``model``, ``_hidden_params``."""

    __slots__ = ("_hidden_params", "choices", "model", "usage")

    def __init__(self, content: str, deployment_id: str, model_name: str, group: str) -> None:
        self.choices = [_Choice(content)]
        self.model = model_name.rsplit("/", 1)[-1]
        self.usage = None
        self._hidden_params = {
            "model_id": deployment_id,
            "litellm_model_name": model_name,
            "custom_llm_provider": "openai",
            "additional_headers": {
                "x-litellm-model-group": group,
                "x-litellm-attempted-fallbacks": 0,
                "x-litellm-attempted-retries": 0,
            },
        }


class ZeroLatencyRouter:
    """Answers instantly: ``group -> (deployment id, provider model)``; the reply depends on the history.

    Args:
        deployments: model group → (deployment id, provider model string).
    """

    def __init__(self, deployments: Mapping[str, tuple[str, str]]) -> None:
        self.deployments = dict(deployments)
        self.model_list = [{"model_name": g, "model_info": {"id": d}} for g, (d, _) in deployments.items()]

    def _respond(self, model: str, messages: Sequence[Any]) -> ZeroResponse:
        dep, name = self.deployments[model]
        return ZeroResponse(f"reply {len(messages)} by {dep}", dep, name, model)

    def completion(self, model: str, messages: Sequence[Any], **kwargs: Any) -> ZeroResponse:
        """Synchronous completion."""
        return self._respond(model, messages)

    async def acompletion(self, model: str, messages: Sequence[Any], **kwargs: Any) -> ZeroResponse:
        """Asynchronous completion (never actually awaits anything)."""
        return self._respond(model, messages)

    def responses(self, model: str, input: Sequence[Any], **kwargs: Any) -> ZeroResponsesResponse:
        """Synchronous Responses API call (``input`` items; litellm's argument names)."""
        dep, name = self.deployments[model]
        return ZeroResponsesResponse(f"reply {len(input)} by {dep}", dep, name)


class ZeroResponsesResponse:
    """What litellm's ``Router.responses`` returns, minus the cost: ``output`` (one message
    item), ``model``, ``status``, ``_hidden_params``."""

    __slots__ = ("_hidden_params", "id", "model", "object", "output", "status", "usage")

    def __init__(self, text: str, deployment_id: str, model_name: str) -> None:
        self.id = "resp_zero"
        self.object = "response"
        self.model = model_name.rsplit("/", 1)[-1]
        self.status = "completed"
        self.usage = None
        self.output = [
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
        ]
        self._hidden_params = {"model_id": deployment_id, "litellm_model_name": model_name}
