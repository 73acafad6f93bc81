"""Who served a reply: one ``ServedBy`` record from LiteLLM responses or headers, one author rule, usage.

Every adapter describes a finished call as an ``Outcome`` (authors, deployment, fallbacks,
retries, usage, response id) built here: the Router and the LiteLLM callback read
``_hidden_params``, the OpenAI client and ``serve`` read LiteLLM's response headers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from handoffmon.attribution.names import ModelNames
from handoffmon.ingress.chunks import MAX_ALTERNATIVES, StreamOutcome
from handoffmon.ingress.fields import EMPTY, get, hidden_params, token_count

# LiteLLM puts these in ``_hidden_params["additional_headers"]`` (Router) and sends them
# as HTTP response headers (LiteLLM Proxy).
H_MODEL_ID = "x-litellm-model-id"
H_MODEL_NAME = "x-litellm-model-name"
H_MODEL_GROUP = "x-litellm-model-group"
H_FALLBACKS = "x-litellm-attempted-fallbacks"
H_RETRIES = "x-litellm-attempted-retries"
SERVED_HEADERS = (H_MODEL_ID, H_MODEL_NAME, H_MODEL_GROUP, H_FALLBACKS, H_RETRIES)
_SERVED_BYTES = {h.encode(): h for h in SERVED_HEADERS}
"""Raw (ASGI) header names → served-by names: ``bytes.lower()`` of a latin-1 name matches one
exactly when ``str.lower()`` of its decoded form does (the names are ASCII, and no other
latin-1 letter lowers to ASCII)."""


class ServedBy(NamedTuple):
    """What a response says about where it came from (all fields optional).

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


class Outcome(NamedTuple):
    """A finished call as the monitor takes it: who served the reply and what it cost.

    Attributes:
        authors: raw author names (see ``author``), in order; two for a mid-stream fallback.
        deployment_id: the deployment that served (the last one).
        fallbacks: fallbacks the router took.
        retries: retries the router made.
        provider: provider name (LiteLLM's ``custom_llm_provider``).
        response_model: model string the provider reported.
        input_tokens: prompt tokens, when reported.
        output_tokens: completion tokens, when reported.
        finish_reason: the first choice's finish reason (``None`` for a cut-off stream).
        response_id: the completion's id (``chatcmpl-…``), for ``gen_ai.response.id``.
        alternatives: the assistant messages of a completion's other choices
            (``n > 1``; the first ``MAX_ALTERNATIVES``), recorded as the same model's so the
            application may continue with any of them. Read by attribution only: the
            attribution stage empties it before the outcome goes further (no content leaves).
        complete: the reply arrived whole: ``False`` for a stream cut off before any finish
            reason (the consumer stopped reading, the client left, the upstream failed). The
            turn is recorded and counted as what the client saw, but its rules are
            ``not_applicable`` (reason ``incomplete``): half a reply says nothing about
            adherence.
    """

    authors: tuple[str, ...] = ()
    deployment_id: str | None = None
    fallbacks: int = 0
    retries: int = 0
    provider: str | None = None
    response_model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    response_id: str | None = None
    alternatives: tuple[dict[str, Any], ...] = ()
    complete: bool = True


def _int(value: object) -> int:
    if type(value) is int:
        return value if value > 0 else 0
    try:
        return max(0, int(value.decode("latin-1") if isinstance(value, bytes) else str(value)))
    except (TypeError, ValueError):
        return 0


def _str(value: object) -> str | None:
    if type(value) is str:  # the usual: one type check
        return value if value and value != "None" else None
    if value is None or value == "" or value == "None":
        return None
    if isinstance(value, bytes):
        return value.decode("latin-1") or None
    return str(value)


def _lower(headers: Any) -> Mapping[str, Any]:
    """LiteLLM's served-by headers with lower-case names, from a mapping or raw (bytes) pairs."""
    if not headers:
        return EMPTY
    if type(headers) is dict or isinstance(headers, Mapping):
        for k in headers:  # already lower-case str names (the usual): as they are
            if type(k) is not str or not k.islower():
                break
        else:
            return headers
        items: Iterable[tuple[Any, Any]] = headers.items()
    else:
        items = headers
    out: dict[str, Any] = {}
    served = _SERVED_BYTES
    for k, v in items:
        if type(k) is bytes:  # serve's raw pairs: no decode of the names it does not read
            name = served.get(k.lower())
            if name is not None:
                out[name] = v
            continue
        name = (k.decode("latin-1") if isinstance(k, bytes) else str(k)).lower()
        if name in SERVED_HEADERS:
            out[name] = v
    return out


def served_by_headers(headers: Any, *, response_model: str | None = None) -> ServedBy:
    """Authorship from LiteLLM response headers: a mapping (httpx, dict) or raw ASGI/aiohttp pairs."""
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
    hp = getattr(response, "_hidden_params", None)
    if type(hp) is not dict:  # the usual is a dict: no Mapping check
        hp = hidden_params(response)
    h = _lower(hp.get("additional_headers"))
    model = getattr(response, "model", None)
    return ServedBy(  # positional: a NamedTuple's keyword arguments cost more than its fields
        _str(hp.get("model_id")) or _str(h.get(H_MODEL_ID)),
        _str(hp.get("litellm_model_name")) or _str(h.get(H_MODEL_NAME)),
        _str(h.get(H_MODEL_GROUP)),
        _int(h.get(H_FALLBACKS)),
        _int(h.get(H_RETRIES)),
        _str(hp.get("custom_llm_provider")),
        _str(hp.get("provider_response_model")) or (model if isinstance(model, str) else None),
    )


def after_fallbacks(served: ServedBy, tried: Sequence[Any]) -> ServedBy:
    """``served`` for a call of the LiteLLM SDK's own fallbacks (``litellm.completion(model=m,
    fallbacks=[...])``, no Router), naming the model that answered.

    LiteLLM (1.108, ``completion_with_fallbacks``) tries ``tried`` = ``(model, *fallbacks)`` in
    order with one logging object, so ``_hidden_params["litellm_model_name"]`` names the first
    attempt even when a fallback answered; its ``x-litellm-attempted-fallbacks`` header is the
    index in ``tried`` of the one that answered (a dict fallback names its ``model``, else the
    call's). A response naming a deployment (a Router's) is left as it is, and so is one whose
    index is not in ``tried``, except that its stale model name is dropped (the response's
    ``model`` names the author then).
    """
    i = served.fallbacks
    if served.deployment_id is not None or i == 0 or not tried:
        return served
    entry = tried[i] if i < len(tried) else None
    name = entry.get("model", tried[0]) if isinstance(entry, Mapping) else entry
    return served._replace(model_name=name if isinstance(name, str) and name else None)


def author(
    names: ModelNames, deployment_id: str | None, model_name: str | None, reported: str | None = None
) -> str | None:
    """The raw name to attribute a reply to — the one author rule of every adapter.

    1. the deployment id when ``attribution.canonical_models`` maps it (an operator naming
       deployments explicitly);
    2. the deployment's provider model string (two deployments of one model are one author);
    3. the deployment id;
    4. the model the response reports (an upstream that names no deployment).
    """
    if deployment_id and names.canonical(deployment_id) != deployment_id:
        return deployment_id
    return model_name or deployment_id or reported


class Usage(NamedTuple):
    """Token usage, finish reason and id of a (non-streamed) completion."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    response_id: str | None = None


def usage_of(response: Any) -> Usage:
    """Usage, finish reason and id of a chat completion (OpenAI or LiteLLM object, or JSON dict)."""
    usage = get(response, "usage")
    choices = get(response, "choices")
    first = choices[0] if isinstance(choices, (list, tuple)) and choices else None
    finish = get(first, "finish_reason") if first is not None else None
    rid = get(response, "id")
    return Usage(
        token_count(get(usage, "prompt_tokens")) if usage is not None else None,
        token_count(get(usage, "completion_tokens")) if usage is not None else None,
        finish if isinstance(finish, str) else None,
        rid if isinstance(rid, str) and rid else None,
    )


def reply_message(response: Any) -> dict[str, Any] | None:
    """The first choice's assistant message as a plain dict (``None`` when absent).

    Copying the few fields attribution reads is much cheaper on the request path than
    letting it ``model_dump()`` a pydantic message.
    """
    choices = get(response, "choices")
    if not isinstance(choices, (list, tuple)) or not choices:
        return None
    return _message(choices[0])


def other_choices(response: Any) -> tuple[dict[str, Any], ...]:
    """The assistant messages of a completion's choices after the first (``n > 1``), at most
    ``MAX_ALTERNATIVES``, as plain dicts; unreadable choices are left out."""
    choices = get(response, "choices")
    if not isinstance(choices, (list, tuple)) or len(choices) < 2:
        return ()
    out = (_message(c) for c in choices[1 : MAX_ALTERNATIVES + 1])
    return tuple(m for m in out if type(m) is dict)


def _message(choice: Any) -> dict[str, Any] | None:
    msg = get(choice, "message")
    if msg is None or type(msg) is dict:
        return msg
    out: dict[str, Any] = {"role": "assistant", "content": get(msg, "content")}
    refusal = get(msg, "refusal")
    if refusal:  # structured outputs' refusal, content null: the reply's text
        out["refusal"] = refusal
    tool_calls = get(msg, "tool_calls")
    if tool_calls:
        out["tool_calls"] = tool_calls
    function_call = get(msg, "function_call")
    if function_call:
        out["function_call"] = function_call
    return out


def describe_response(names: ModelNames, response: Any, served: ServedBy | None) -> Outcome:
    """The ``Outcome`` of a non-streamed completion (runs on the attribution thread).

    Args:
        names: canonical model names (for the author rule).
        response: a chat completion (litellm ``ModelResponse``, OpenAI SDK object, JSON dict).
        served: where it came from (headers); ``None`` reads the response's ``_hidden_params``.
    """
    if served is None:
        served = served_by_response(response)
    usage = usage_of(response)
    reported = get(response, "model")
    reported = served.response_model or (reported if isinstance(reported, str) else None)
    who = author(names, served.deployment_id, served.model_name, reported)
    return Outcome(
        (who,) if who else (),
        served.deployment_id,
        served.fallbacks,
        served.retries,
        served.provider,
        reported,
        usage.input_tokens,
        usage.output_tokens,
        usage.finish_reason,
        usage.response_id,
        other_choices(response),
    )


def describe_stream(
    names: ModelNames,
    out: StreamOutcome,
    served: ServedBy,
    model_of: Callable[[str], str | None] | None = None,
) -> Outcome:
    """The ``Outcome`` of a finished (or cut-off) stream.

    A mid-stream fallback gives the turn one author per deployment that produced text
    (LiteLLM marks each chunk with its deployment); otherwise the deployment ``served``
    names, else the model the chunks reported.

    Args:
        names: canonical model names (for the author rule).
        out: the folded stream.
        served: where it came from (the stream wrapper's ``_hidden_params`` or headers).
        model_of: a deployment id's provider model string (the router's deployment table).
    """
    ids = out.deployment_ids or ((served.deployment_id,) if served.deployment_id else ())
    authors: list[str] = []
    for dep in ids:
        name = (model_of(dep) if model_of is not None else None) or (
            served.model_name if dep == served.deployment_id else None
        )
        who = author(names, dep, name)
        if who:
            authors.append(who)
    reported = out.response_model or served.response_model
    if not authors:
        who = author(names, None, served.model_name, reported)
        if who:
            authors.append(who)
    return Outcome(
        tuple(authors),
        ids[-1] if ids else served.deployment_id,
        served.fallbacks,
        served.retries,
        served.provider,
        reported,
        out.input_tokens,
        out.output_tokens,
        out.finish_reason,
        out.response_id,
        out.alternatives,
        # all of it arrived, or at least the finish reason did (a consumer that stops
        # between the last chunk and the end of the stream has the whole reply)
        out.completed or out.finish_reason is not None,
    )
