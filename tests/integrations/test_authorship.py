"""Reading who served a reply: hidden params, LiteLLM headers, author naming rule."""

from __future__ import annotations

from handoffmon.attribution.names import ModelNames
from handoffmon.integrations.authorship import (
    first_message,
    raw_author,
    served_by_headers,
    served_by_response,
    usage_of,
)


class _Resp:
    def __init__(self, hidden: dict[str, object]) -> None:
        self._hidden_params = hidden
        self.model = "gpt-x-2024"
        self.choices = [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "length"}]
        self.usage = {"prompt_tokens": 5, "completion_tokens": 2}


def test_hidden_params_and_additional_headers() -> None:
    """model_id / litellm_model_name / attempted counts are read; header names are case-insensitive."""
    r = _Resp(
        {
            "model_id": "dep-9",
            "litellm_model_name": "azure/gpt-x",
            "custom_llm_provider": "azure",
            "additional_headers": {"X-LiteLLM-Attempted-Fallbacks": "2", "x-litellm-attempted-retries": 3},
        }
    )
    s = served_by_response(r)
    assert (s.deployment_id, s.model_name, s.fallbacks, s.retries, s.provider) == (
        "dep-9",
        "azure/gpt-x",
        2,
        3,
        "azure",
    )
    assert s.response_model == "gpt-x-2024"
    assert usage_of(r) == (5, 2, "length")
    assert first_message(r) == {"role": "assistant", "content": "hi"}


def test_headers_and_garbage_values() -> None:
    """Proxy headers parse; non-numeric counts become 0 and 'None' strings mean absent."""
    s = served_by_headers(
        {"X-LiteLLM-Model-Id": "None", "x-litellm-model-name": "m", "x-litellm-attempted-fallbacks": "x"}
    )
    assert (s.deployment_id, s.model_name, s.fallbacks) == (None, "m", 0)
    assert served_by_response(object()).deployment_id is None


def test_author_is_the_mapped_deployment_else_the_model_string() -> None:
    """A deployment id named in canonical_models wins; otherwise the provider model string."""
    names = ModelNames({"dep-1": "eu-gpt"})
    assert raw_author(names, "dep-1", "openai/gpt-4o") == "dep-1"
    assert raw_author(names, "dep-2", "openai/gpt-4o") == "openai/gpt-4o"
    assert raw_author(names, "dep-2", None) == "dep-2"
    assert raw_author(names, None, None) is None
