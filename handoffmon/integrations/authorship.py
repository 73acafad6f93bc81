"""Who served a reply: deployment, model name, group, fallback and retry counts from responses and headers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from handoffmon.attribution.names import ModelNames

if TYPE_CHECKING:  # pragma: no cover
    from handoffmon.pipeline.monitor import Monitor
    from handoffmon.pipeline.turn import Described, TurnHandle

# LiteLLM puts these in ``_hidden_params["additional_headers"]`` (Router) and sends them
# as HTTP response headers (LiteLLM Proxy).
H_MODEL_ID = "x-litellm-model-id"
H_MODEL_NAME = "x-litellm-model-name"
H_MODEL_GROUP = "x-litellm-model-group"
H_FALLBACKS = "x-litellm-attempted-fallbacks"
H_RETRIES = "x-litellm-attempted-retries"


class ServedBy(NamedTuple):
    """What a response says about where it came from (all fields optional).

    A NamedTuple rather than a frozen dataclass: built on every request, and a frozen
    dataclass's ``__init__`` costs several times more.

    Attributes:
        deployment_id: router deployment id (``model_info.id``).
        model_name: the deployment's provider model string (``openai/gpt-4o``).
        model_group: the group that finally served (after fallbacks).
        fallbacks: fallbacks the router took.
        retries: retries the router made.
        provider: provider name.
        response_model: model string the provider reported.
    """

    deployment_id: str | None = None
    model_name: str | None = None
    model_group: str | None = None
    fallbacks: int = 0
    retries: int = 0
    provider: str | None = None
    response_model: str | None = None


_EMPTY: Mapping[str, Any] = {}


def _int(value: object) -> int:
    if type(value) is int:
        return max(0, value)
    try:
        return max(0, int(str(value)))
    except (TypeError, ValueError):
        return 0


def _str(value: object) -> str | None:
    if value is None or value == "" or value == "None":
        return None
    return value if type(value) is str else str(value)


def hidden_params(obj: Any) -> Mapping[str, Any]:
    """LiteLLM's ``_hidden_params`` of a response, stream wrapper or chunk ({} when absent)."""
    hp = getattr(obj, "_hidden_params", None)
    if hp is None and isinstance(obj, Mapping):
        hp = obj.get("_hidden_params")
    return hp if isinstance(hp, Mapping) else _EMPTY


def _lower(headers: Any) -> Mapping[str, Any]:
    """Headers with lower-case names (LiteLLM already sends them so: then no copy is made)."""
    if not headers or not isinstance(headers, Mapping):
        return _EMPTY
    if all(type(k) is str and k.islower() for k in headers):
        return headers  # type: ignore[no-any-return]
    return {str(k).lower(): v for k, v in headers.items()}


def served_by_headers(headers: Mapping[str, Any] | None, *, response_model: str | None = None) -> ServedBy:
    """Authorship from LiteLLM response headers (a LiteLLM Proxy or Router upstream)."""
    h = _lower(headers)
    return ServedBy(
        deployment_id=_str(h.get(H_MODEL_ID)),
        model_name=_str(h.get(H_MODEL_NAME)),
        model_group=_str(h.get(H_MODEL_GROUP)),
        fallbacks=_int(h.get(H_FALLBACKS)),
        retries=_int(h.get(H_RETRIES)),
        response_model=response_model,
    )


def served_by_response(response: Any) -> ServedBy:
    """Authorship from a LiteLLM response or stream wrapper (``_hidden_params``)."""
    hp = hidden_params(response)
    h = _lower(hp.get("additional_headers"))
    model = getattr(response, "model", None)
    return ServedBy(
        deployment_id=_str(hp.get("model_id")) or _str(h.get(H_MODEL_ID)),
        model_name=_str(hp.get("litellm_model_name")) or _str(h.get(H_MODEL_NAME)),
        model_group=_str(h.get(H_MODEL_GROUP)),
        fallbacks=_int(h.get(H_FALLBACKS)),
        retries=_int(h.get(H_RETRIES)),
        provider=_str(hp.get("custom_llm_provider")),
        response_model=_str(hp.get("provider_response_model")) or (model if isinstance(model, str) else None),
    )


def raw_author(names: ModelNames, deployment_id: str | None, model_name: str | None) -> str | None:
    """The raw name to attribute a reply to.

    The deployment id when ``attribution.canonical_models`` maps it (an operator naming
    deployments explicitly), else the provider model string (two deployments of one
    model are one author), else the deployment id.
    """
    if deployment_id and names.canonical(deployment_id) != deployment_id:
        return deployment_id
    return model_name or deployment_id


class Usage(NamedTuple):
    """Token usage and finish reason of a (non-streamed) response."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None


def _get(obj: Any, name: str) -> Any:
    if type(obj) is dict or (not hasattr(obj, name) and isinstance(obj, Mapping)):
        return obj.get(name)
    return getattr(obj, name, None)


def usage_of(response: Any) -> Usage:
    """Usage and finish reason of a chat completion (OpenAI or LiteLLM shape)."""
    usage = _get(response, "usage")
    choices = _get(response, "choices") or ()
    finish = _get(choices[0], "finish_reason") if choices else None
    if usage is None:
        return Usage(finish_reason=finish if isinstance(finish, str) else None)
    pt, ct = _get(usage, "prompt_tokens"), _get(usage, "completion_tokens")
    return Usage(
        input_tokens=pt if isinstance(pt, int) else None,
        output_tokens=ct if isinstance(ct, int) else None,
        finish_reason=finish if isinstance(finish, str) else None,
    )


def first_message(response: Any) -> dict[str, Any] | None:
    """The first choice's assistant message as a plain dict (``None`` when absent).

    Copying the few fields attribution reads is much cheaper on the request path than
    letting it ``model_dump()`` a pydantic message.
    """
    choices = _get(response, "choices") or ()
    msg = _get(choices[0], "message") if choices else None
    if msg is None or type(msg) is dict:
        return msg
    out: dict[str, Any] = {"role": "assistant", "content": _get(msg, "content")}
    tool_calls = _get(msg, "tool_calls")
    if tool_calls:
        out["tool_calls"] = tool_calls
    function_call = _get(msg, "function_call")
    if function_call:
        out["function_call"] = function_call
    return out


def describe_response(
    names: ModelNames, response: Any, served: ServedBy | None, fallback_author: str | None
) -> Described:
    """Author, deployment, fallbacks and usage of a (non-streamed) response.

    Args:
        names: canonical model names (to pick the raw author, see ``raw_author``).
        response: a chat completion (litellm ``ModelResponse`` or OpenAI SDK object).
        served: where it came from; ``None`` reads the response's ``_hidden_params``.
        fallback_author: author to use when nothing names a deployment or model.
    """
    from handoffmon.pipeline.turn import Described

    if served is None:
        served = served_by_response(response)
    usage = usage_of(response)
    author = raw_author(names, served.deployment_id, served.model_name) or fallback_author
    return Described(
        (author,) if author else (),
        served.deployment_id,
        served.fallbacks,
        served.retries,
        served.provider,
        served.response_model,
        usage.input_tokens,
        usage.output_tokens,
        usage.finish_reason,
    )


def finish_from_response(
    monitor: Monitor,
    ctx: TurnHandle,
    response: Any,
    served: ServedBy | None,
    *,
    latency_s: float | None,
    fallback_author: str | None = None,
) -> None:
    """Hand a completed (non-streamed) response to the monitor.

    The reply message is copied now; who served it (``describe_response``) is read on the
    attribution thread for a captured turn, so a LiteLLM response costs the request path
    one message copy.

    Args:
        monitor: the monitor recording the turn.
        ctx: the turn's handle from ``monitor.capture`` (or ``monitor.begin``).
        response: a chat completion (litellm ``ModelResponse`` or OpenAI SDK object).
        served: where it came from (``served_by_headers``); ``None``: from ``_hidden_params``.
        latency_s: wall time of the call (``None``: the monitor measures from ``ctx``).
        fallback_author: author to use when the response names no deployment or model.
    """
    monitor.finish_described(
        ctx,
        first_message(response),
        describe_response,
        (monitor.names, response, served, fallback_author),
        latency_s=latency_s,
    )
