"""The LiteLLM SDK without a Router: ``handoffmon.wrap(litellm)`` monitors its module functions;
the Proxy callback registered in an SDK process says, once, that it monitors nothing there.

Real ``litellm`` (its ``mock_response`` stands in for the provider).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import litellm
import pytest

from handoffmon.integrations import wrap
from handoffmon.integrations.router import RouterWrapper
from handoffmon.runtime import build_runtime
from handoffmon.testing import RecordingExporter
from tests.pipeline.helpers import make_config

CONFIG = make_config(rules=[{"name": "no_commas", "check": "no_commas"}])


async def _text(reply: Any, is_async: bool) -> str:
    """A completion's text, or a stream's (sync or async), read to the end."""
    if hasattr(reply, "choices"):
        return str(reply.choices[0].message.content)
    chunks = [c async for c in reply] if is_async else list(reply)
    return "".join(c.choices[0].delta.content or "" for c in chunks)


async def test_wrapped_module_functions_are_turns() -> None:
    """``wrap(litellm)``: completion, acompletion, and both streamed, across two providers — four
    turns at depths 1-4, each by the model called, every earlier reply attributed, hand-offs
    where the provider changed."""
    exp = RecordingExporter()
    rt = build_runtime(CONFIG, registry=None, exporters=[exp])
    try:
        llm = wrap(litellm, runtime=rt)
        assert isinstance(llm, RouterWrapper) and llm.runtime is rt
        plan = [
            ("openai/gpt-4o", "completion", False),
            ("anthropic/claude-sonnet-4", "acompletion", False),
            ("anthropic/claude-sonnet-4", "completion", True),
            ("openai/gpt-4o", "acompletion", True),
        ]
        messages: list[dict[str, Any]] = [{"role": "user", "content": "hello sdk"}]
        for depth, (model, fn, stream) in enumerate(plan, 1):
            text = f"Reply {depth} from {model}."
            call = getattr(llm, fn)(
                model=model, messages=messages, mock_response=text, api_key="k", stream=stream
            )
            is_async = fn == "acompletion"
            got = await _text(await call if is_async else call, is_async)
            assert got == text
            messages += [{"role": "assistant", "content": got}, {"role": "user", "content": f"next {depth}"}]
        assert rt.flush(10)
        assert rt.monitor.snapshot().monitor_errors == {}
    finally:
        rt.close(0)
    results = exp.results
    assert [r.context.depth for r in results] == [1, 2, 3, 4]
    authors = [r.record.author for r in results]
    assert authors == [model for model, _fn, _s in plan]
    assert [r.context.prefix_model for r in results] == ["none", *authors[:-1]]
    assert [r.record.handoff for r in results] == [False, True, False, True]
    assert [[a.method for a in r.context.attributions] for r in results] == [["chain"] * d for d in range(4)]
    assert [r.record.streamed for r in results] == [False, False, True, True]


@pytest.mark.slow
def test_the_proxy_callback_in_an_sdk_process_says_it_monitors_nothing() -> None:
    """``litellm.callbacks = [handoffmon_callback]`` in a process that is not a LiteLLM Proxy:
    the SDK's calls reach only the logging hooks, which the callback does not monitor, so it
    logs one warning naming ``handoffmon.wrap(litellm)`` (not one per call) and records
    nothing. In a fresh interpreter: whether the proxy's server module is loaded decides it."""
    script = textwrap.dedent(
        """
        import asyncio, logging, time
        import litellm
        from handoffmon.integrations.litellm_callback import HandoffmonCallback
        from handoffmon.runtime import build_runtime
        from tests.pipeline.helpers import make_config

        logging.basicConfig(level=logging.WARNING, format="%(name)s %(message)s")
        rt = build_runtime(make_config(), registry=None)
        litellm.callbacks = [HandoffmonCallback(runtime=rt)]
        kw = dict(model="openai/gpt-4o", messages=[{"role": "user", "content": "hi"}], mock_response="ok")
        for _ in range(3):
            litellm.completion(**kw, api_key="k")
            asyncio.run(litellm.acompletion(**kw, api_key="k"))
        time.sleep(1.0)  # LiteLLM runs success callbacks on its logging worker
        rt.flush(10)
        print("TURNS", rt.monitor.snapshot().total_turns)
        rt.close(0)
        """
    )
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "TURNS 0" in out.stdout
    warnings = [line for line in out.stderr.splitlines() if "handoffmon.wrap(litellm)" in line]
    assert len(warnings) == 1, out.stderr[-3000:]
    assert warnings[0].startswith("handoffmon.integrations ")


async def test_calls_in_a_proxy_never_warn(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Success events the proxy's own calls raise warn about nothing: a client's call (it
    carries the proxy's request), and, once the proxy's pre-call hook has run, calls without it
    (a shadow call through the proxy's router, a health check). The proxy's server module is
    taken out of ``sys.modules`` for the test, so these two conditions decide alone."""
    from handoffmon.integrations.litellm_callback import HandoffmonCallback

    monkeypatch.delitem(sys.modules, "litellm.proxy.proxy_server", raising=False)
    rt = build_runtime(CONFIG, registry=None)
    try:
        with caplog.at_level("WARNING", logger="handoffmon.integrations"):
            client_call = HandoffmonCallback(runtime=rt)
            event = {"litellm_params": {"proxy_server_request": {"url": "/v1/chat/completions"}}}
            client_call.log_success_event(event, None, None, None)
            await client_call.async_log_success_event(event, None, None, None)
            proxied = HandoffmonCallback(runtime=rt)
            await proxied.async_pre_call_hook(None, None, {"litellm_call_id": "c1"}, "completion")
            await proxied.async_log_success_event({"litellm_params": {}}, None, None, None)
            assert not [r for r in caplog.records if "handoffmon.wrap(litellm)" in r.getMessage()]
            HandoffmonCallback(runtime=rt).log_success_event({"litellm_params": {}}, None, None, None)
        assert len([r for r in caplog.records if "handoffmon.wrap(litellm)" in r.getMessage()]) == 1
    finally:
        rt.close(0)


# LiteLLM runs the sync call's fallbacks on an event loop of its own, which leaves its logging
# worker's coroutine unawaited (LiteLLM's warning, also without handoffmon)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("mode", ["sync", "async", "astream"])
async def test_the_sdk_s_own_fallbacks_credit_the_model_that_answered(chat_base: str, mode: str) -> None:
    """``wrap(litellm).completion(model=dead, fallbacks=[a])``: LiteLLM tries the dead model (503),
    then the fallback, with one logging object, so the response's ``litellm_model_name`` still
    names the dead model; the turn is the fallback's (the attempted-fallbacks index into the
    models tried), and the next turn's prefix is it too. A dict fallback names its ``model``.
    (Before: both turns were credited to ``openai/model-dead``, which never answered.) A sync
    stream is left out: LiteLLM 1.108's own sync streaming fallbacks raise, wrapped or not."""
    exp = RecordingExporter()
    rt = build_runtime(CONFIG, registry=None, exporters=[exp])
    is_async, stream = mode.startswith("a"), mode.endswith("stream")
    fallbacks: list[list[Any]] = [["openai/model-a"], [{"model": "openai/model-b"}]]
    try:
        llm = wrap(litellm, runtime=rt)
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"fallbacks {mode}"}]
        for fb in fallbacks:
            fn = llm.acompletion if is_async else llm.completion
            call = fn(
                model="openai/model-dead",
                fallbacks=fb,
                messages=messages,
                api_base=chat_base,
                api_key="k",
                num_retries=0,
                stream=stream,
            )
            text = await _text(await call if is_async else call, is_async)
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "and?"}]
        assert rt.flush(10)
    finally:
        rt.close()
    records = [r.record for r in exp.results]
    assert [r.author for r in records] == ["openai/model-a", "openai/model-b"]
    assert [r.fallbacks for r in records] == [1, 1]
    assert [r.context.prefix_model for r in exp.results] == ["none", "openai/model-a"]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_with_positional_input_and_model_are_turns(responses_base: str, stream: bool) -> None:
    """``litellm.responses(input, model, ...)`` takes its input (and model) positionally; called so
    through ``wrap(litellm)`` the call is the same turn as with keywords: its model requested,
    its input the history (depth 2 after the first reply, attributed to its author). (litellm
    1.108's ``aresponses`` reads its first positional argument as the model: it is keywords only.)"""
    exp = RecordingExporter()
    rt = build_runtime(CONFIG, registry=None, exporters=[exp])
    llm = wrap(litellm, runtime=rt)
    opts = {"api_base": responses_base, "api_key": "k", "stream": stream}
    try:
        first = _final(llm.responses("hello", "openai/gpt-c", **opts))
        items = [{"role": "user", "content": "hello"}, *_output(first), {"role": "user", "content": "more"}]
        _final(llm.responses(items, model="openai/gpt-c", **opts))
        assert rt.flush(10)
    finally:
        rt.close()
    assert [(r.context.depth, r.context.requested_model) for r in exp.results] == [
        (1, "openai/gpt-c"),
        (2, "openai/gpt-c"),
    ]
    assert exp.results[1].context.prefix_model == exp.results[0].record.author != "unknown"


def _final(result: Any) -> Any:
    """A Responses call's final response (its stream read to the end)."""
    if hasattr(result, "output"):
        return result
    (done,) = [e for e in result if e.type == "response.completed"]
    return done.response


def _output(response: Any) -> list[dict[str, Any]]:
    return [o.model_dump(exclude_none=True) for o in response.output]
