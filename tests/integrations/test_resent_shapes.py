"""Valid ways a client sends a reply back, each attributed to the model that wrote it: a refusal
(structured outputs) resent as a refusal part or as text, a reply resent with a ``name`` (agent
frameworks name each agent's messages). A real Router; a refusal comes from a scripted upstream
over loopback, as the provider sends it (``content`` null, ``refusal`` set)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from handoffmon.integrations import wrap
from handoffmon.runtime import build_runtime
from handoffmon.testing import RecordingExporter
from tests.conftest import free_port
from tests.pipeline.helpers import make_config
from tests.proxy.mock_upstream import ServerThread
from tests.proxy.scripted_upstream import Script, ScriptedUpstream

REFUSAL = "I cannot help with that request, sorry about it."
NEXT = "the next model answers with a reply long enough to be keyed"
LONG = "alpha says a long enough reply here, definitely keyed by content"


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[ScriptedUpstream, str]]:
    app = ScriptedUpstream()
    with ServerThread(app, free_port()) as srv:
        yield app, f"{srv.url}/v1"


def _router(base: str, script: str) -> Any:
    from litellm import Router

    def dep(group: str, model: str, dep_id: str, **params: Any) -> dict[str, Any]:
        return {
            "model_name": group,
            "litellm_params": {"model": model, "api_key": "k", **params},
            "model_info": {"id": dep_id},
        }

    return Router(
        model_list=[
            dep("refuse", "openai/refuse-m", "dep-r", api_base=base, extra_headers={"x-script": script}),
            dep("alpha", "openai/gpt-c", "dep-c", mock_response=LONG),
            dep("next", "openai/gpt-n", "dep-n", mock_response=NEXT),
        ],
        num_retries=0,
    )


def _refusal_script(app: ScriptedUpstream) -> str:
    body = {
        "id": "chatcmpl-r",
        "object": "chat.completion",
        "created": 1,
        "model": "refuse-m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "refusal": REFUSAL},
                "finish_reason": "stop",
            }
        ],
    }
    return app.add(Script([json.dumps(body).encode()], headers=[(b"content-type", b"application/json")]))


SHAPES = {
    "field": lambda r: {"role": "assistant", "content": None, "refusal": r},
    "part": lambda r: {"role": "assistant", "content": [{"type": "refusal", "refusal": r}]},
    "text": lambda r: {"role": "assistant", "content": r},
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_refusal_resent_as_a_part_or_as_text_is_the_refusing_model_s(
    scripted: tuple[ScriptedUpstream, str], shape: str
) -> None:
    """The provider refuses (``refusal``, content null); the application sends it back as the
    field, as OpenAI's refusal part, or as text: the next turn's prefix is the refusing model.
    (Before: the recorded reply dropped the refusal and a part was an opaque placeholder, so
    the part and the text gave ``unknown``.)"""
    app, base = scripted
    exp = RecordingExporter()
    rt = build_runtime(make_config(), registry=None, exporters=[exp])
    try:
        wrapped = wrap(_router(base, _refusal_script(app)), runtime=rt)
        asked = [{"role": "user", "content": f"something forbidden ({shape})"}]
        reply = wrapped.completion(model="refuse", messages=asked)
        assert reply.choices[0].message.refusal == REFUSAL
        history = [
            *asked,
            SHAPES[shape](reply.choices[0].message.refusal),
            {"role": "user", "content": "why?"},
        ]
        wrapped.completion(model="next", messages=history)
        assert rt.flush(10)
    finally:
        rt.close()
    first, second = exp.results
    assert first.record.author == "openai/refuse-m"
    assert (second.context.depth, second.context.prefix_model) == (2, "openai/refuse-m")
    assert [a.method for a in second.context.attributions] == ["chain"]  # one digest, every shape


@pytest.mark.parametrize("role_named", ["assistant", "assistant+user"])
def test_a_reply_resent_with_a_name_is_still_attributed(role_named: str) -> None:
    """LangGraph/AutoGen-style histories name each agent's messages (``"name": "bot"``); the
    model never returned that name, so the reply is still found — by its chain, since the user
    message is named too in the second case and the chain ignores names. (Before: ``unknown``
    even for a reply long enough to match on content.)"""
    exp = RecordingExporter()
    rt = build_runtime(make_config(), registry=None, exporters=[exp])
    try:
        wrapped = wrap(_router("http://127.0.0.1:9/v1", "unused"), runtime=rt)
        asked: list[dict[str, Any]] = [{"role": "user", "content": "hello agents"}]
        text = wrapped.completion(model="alpha", messages=asked).choices[0].message.content
        if role_named == "assistant+user":
            asked = [{**asked[0], "name": "alice"}]
        history = [
            *asked,
            {"role": "assistant", "content": text, "name": "bot"},
            {"role": "user", "content": "go"},
        ]
        wrapped.completion(model="next", messages=history)
        assert rt.flush(10)
    finally:
        rt.close()
    second = exp.results[1]
    assert (second.context.depth, second.context.prefix_model) == (2, "openai/gpt-c")
    assert [a.method for a in second.context.attributions] == ["chain"]
