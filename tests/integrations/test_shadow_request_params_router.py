"""A wrapped real ``litellm.Router``: a shadow call repeats the served call's generation parameters.

A rule those parameters act on (JSON format through ``response_format``) otherwise compares a
served reply made with them to a shadow reply made without: a biased switch cost. LiteLLM's own
input hook (a ``CustomLogger`` in ``litellm.input_callback``, called before the provider request
with the parameters LiteLLM will send) sees the shadow call: the served call's ``temperature``
and ``response_format``, an output cap no larger than its ``max_tokens``, the deployment's key
(not the call's), the shadow tag as its only metadata, not streamed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytest.importorskip("litellm")

from litellm.integrations.custom_logger import CustomLogger

from handoffmon.integrations import wrap
from tests.shadow.helpers import shadow_runtime

RULES = [{"name": "brief", "check": "length", "params": {"unit": "words", "max": 5}}]
CANONICAL = {"dep-b": "model-b", "dep-c": "model-c", "openai/gpt-c": "model-c"}
"""A call with its own ``api_key`` is served by a deployment LiteLLM makes for those credentials
(not ``dep-c``): its author is the provider model, named here too."""
JSON_FORMAT = {"type": "json_object"}
REPLY = '{"answer": "ok"}'
SERVED: dict[str, Any] = {
    "temperature": 0.2,
    "response_format": JSON_FORMAT,
    "max_tokens": 50,
    "user": "u-1",
    "api_key": "sk-app",
}
"""What the application's calls set besides model and messages (no metadata: the lean path)."""
APP_METADATA = {"tenant": "t-1"}


class Inputs(CustomLogger):  # type: ignore[misc]
    """Keeps what LiteLLM is about to send for each shadow call (tagged in its metadata)."""

    def __init__(self) -> None:
        super().__init__()
        self.shadow: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def log_pre_api_call(self, model: str, messages: Any, kwargs: dict[str, Any]) -> None:
        litellm_params = kwargs.get("litellm_params") or {}
        metadata = dict(litellm_params.get("metadata") or {})
        if metadata.get("handoffmon_shadow"):
            sent = {**litellm_params, "metadata": metadata}
            self.shadow.append((dict(kwargs.get("optional_params") or {}), sent))


def _dep(group: str, name: str) -> dict[str, Any]:
    return {
        "model_name": group,
        "litellm_params": {"model": f"openai/gpt-{name}", "api_key": "k", "mock_response": REPLY},
        "model_info": {"id": f"dep-{name}", "input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6},
    }


@pytest.fixture
def inputs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Inputs]:
    """The input hook, alone in LiteLLM's process-wide callback lists for the test."""
    import litellm

    for name in ("callbacks", "success_callback", "failure_callback", "_async_success_callback",
                 "_async_failure_callback", "service_callback"):  # fmt: skip
        monkeypatch.setattr(litellm, name, [])
    hook = Inputs()
    monkeypatch.setattr(litellm, "input_callback", [hook])
    yield hook


def _router() -> Any:
    from litellm import Router

    return Router(model_list=[_dep("alpha", "c"), _dep("backup", "b")], num_retries=0)


async def _two_turns(call: str, **kwargs: Any) -> None:
    """Two turns on alpha (model-c twice: the candidate model-b is shadowed at depth 2)."""
    with shadow_runtime(RULES, "model-b", {"model-c": ["model-b"]}, CANONICAL) as rt:
        client = wrap(_router(), runtime=rt)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
        for i in range(2):
            reply = getattr(client, call)(model="alpha", messages=messages, **kwargs)
            if call == "acompletion":
                reply = await reply
            if kwargs.get("stream"):
                chunks = [c async for c in reply] if call == "acompletion" else list(reply)
                assert "".join(c.choices[0].delta.content or "" for c in chunks) == REPLY
            else:
                assert reply.choices[0].message.content == REPLY
            messages += [{"role": "assistant", "content": REPLY}, {"role": "user", "content": f"more {i}"}]
            assert rt.flush(20)
        assert rt.shadow is not None and rt.shadow.stats.calls == {("no_handoff", "ok"): 1}


def _assert_repeated(inputs: Inputs) -> None:
    (optional, sent), *more = inputs.shadow
    assert not more
    assert (optional["temperature"], optional["response_format"]) == (0.2, JSON_FORMAT)
    assert 0 < optional["max_tokens"] <= 50  # shadow.max_output_tokens is 1,024 by default
    assert optional.get("stream") in (None, False) and "stream_options" not in optional
    assert "user" not in optional
    assert sent["api_key"] == "k"  # the deployment's, not the call's
    assert sent["metadata"].get("tenant") is None  # the tag only, none of the application's


async def test_a_completions_shadow_call_repeats_its_parameters(inputs: Inputs) -> None:
    """``completion`` without metadata (read off the request path, ``_read_call``)."""
    await _two_turns("completion", **SERVED)
    _assert_repeated(inputs)


async def test_a_completion_with_metadata_has_its_parameters_repeated_not_its_metadata(
    inputs: Inputs,
) -> None:
    """``completion`` with the application's metadata (read on the request path, ``_finish``)."""
    await _two_turns("completion", metadata=APP_METADATA, **SERVED)
    _assert_repeated(inputs)


async def test_an_acompletions_shadow_call_repeats_its_parameters(inputs: Inputs) -> None:
    await _two_turns("acompletion", metadata=APP_METADATA, **SERVED)
    _assert_repeated(inputs)


@pytest.mark.parametrize("call", ["completion", "acompletion"])
async def test_a_streamed_calls_shadow_call_is_not_streamed_but_repeats_its_parameters(
    inputs: Inputs, call: str
) -> None:
    await _two_turns(call, stream=True, stream_options={"include_usage": True}, **SERVED)
    _assert_repeated(inputs)
