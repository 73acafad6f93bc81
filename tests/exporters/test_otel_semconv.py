"""GenAI semantic-convention values on handoffmon's OTel attributes, checked against the
``opentelemetry-semantic-conventions`` package and LiteLLM's own provider ids."""

from __future__ import annotations

import litellm
import pytest
from litellm.types.utils import LlmProviders
from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import GenAiProviderNameValues

from handoffmon.exporters.otel import PROVIDER, evaluation_attributes, span_attributes
from handoffmon.types import CheckResult
from tests.exporters.turns import make_result

WELL_KNOWN = {v.value for v in GenAiProviderNameValues}

# LiteLLM provider id (what a response's custom_llm_provider says) → the well-known value of
# the vendor it calls; the text-completion and "_chat"/"_text" ids are the same vendors' other
# endpoints (``gpt-3.5-turbo-instruct`` resolves to ``text-completion-openai``).
VENDOR_IDS = {
    "openai": "openai",
    "text-completion-openai": "openai",
    "azure": "azure.ai.openai",
    "azure_text": "azure.ai.openai",
    "azure_ai": "azure.ai.inference",
    "anthropic": "anthropic",
    "anthropic_text": "anthropic",
    "cohere": "cohere",
    "cohere_chat": "cohere",
    "bedrock": "aws.bedrock",
    "vertex_ai": "gcp.vertex_ai",
    "vertex_ai_beta": "gcp.vertex_ai",
    "gemini": "gcp.gemini",
    "mistral": "mistral_ai",
    "codestral": "mistral_ai",
    "text-completion-codestral": "mistral_ai",
    "watsonx": "ibm.watsonx.ai",
    "watsonx_text": "ibm.watsonx.ai",
    "xai": "x_ai",
    "groq": "groq",
    "deepseek": "deepseek",
    "perplexity": "perplexity",
}


def test_the_table_names_real_litellm_ids_and_semconv_values() -> None:
    assert set(VENDOR_IDS) <= {p.value for p in LlmProviders}
    assert set(VENDOR_IDS.values()) <= WELL_KNOWN
    _, provider, _, _ = litellm.get_llm_provider("gpt-3.5-turbo-instruct")
    assert provider == "text-completion-openai"


@pytest.mark.parametrize("litellm_id", sorted(VENDOR_IDS))
def test_provider_name_is_the_well_known_value(litellm_id: str) -> None:
    attrs = span_attributes(make_result(provider=litellm_id))
    assert attrs[PROVIDER] == VENDOR_IDS[litellm_id]


def test_unknown_providers_pass_through() -> None:
    assert span_attributes(make_result(provider="handoffsim"))[PROVIDER] == "handoffsim"


@pytest.mark.parametrize(
    ("reason", "error_type"),
    [
        ("raised:ValueError", "ValueError"),
        ("over_budget", "over_budget"),
        ("too_large", "too_large"),
        ("scope_error", "scope_error"),
        ("upstream said 503 for https://judge.internal/v1?key=abc", "_OTHER"),
        ("", "_OTHER"),
    ],
)
def test_error_type_is_a_low_cardinality_class(reason: str, error_type: str) -> None:
    """``error.type`` SHOULD be predictable and low-cardinality (semconv error registry): an
    exception's class name, handoffmon's own error reasons, else the well-known ``_OTHER``. The
    checker's whole reason stays in ``gen_ai.evaluation.explanation``."""
    check = CheckResult("rule", "error", reason or None)
    attrs = evaluation_attributes(check, None)
    assert attrs["error.type"] == error_type
    assert attrs.get("gen_ai.evaluation.explanation") == (reason or None)
