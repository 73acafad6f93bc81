"""What a wrapper must do besides monitoring calls, for the application to get what it would get
unwrapped: attribute writes reach the wrapped router or client (reads already do), a client
wrapper works as a context manager (``with`` / ``async with``) and stays the monitored one inside.

Real SDK clients talk HTTP to the loopback mock upstreams; real ``litellm`` and Routers.
"""

from __future__ import annotations

from typing import Any

import anthropic
import litellm
import openai
import pytest

from handoffmon.integrations import wrap
from handoffmon.runtime import build_runtime
from handoffmon.testing import RecordingExporter
from tests.conftest import free_port
from tests.integrations.routers import fallback_router
from tests.pipeline.helpers import make_config
from tests.proxy.mock_upstream import MockUpstream, ServerThread

CONFIG = make_config()


@pytest.fixture
def upstream() -> Any:
    """A chat upstream that records what it received, and its ``/v1`` base URL."""
    app = MockUpstream()
    with ServerThread(app, free_port()) as srv:
        yield app, f"{srv.url}/v1"


def _runtime(exp: RecordingExporter | None = None) -> Any:
    return build_runtime(CONFIG, registry=None, exporters=[exp] if exp is not None else [])


def test_a_rotated_api_key_is_the_one_the_next_request_sends(upstream: Any) -> None:
    """``wrapped.api_key = "new"`` (key rotation) reaches the client: the next request sends the
    new key, as the unwrapped client would; the wrapper reads it back and still monitors."""
    app, base = upstream
    exp = RecordingExporter()
    rt = _runtime(exp)
    try:
        raw = openai.OpenAI(base_url=base, api_key="old-key", max_retries=0)
        wrapped = wrap(raw, runtime=rt)
        wrapped.api_key = "new-key"
        assert raw.api_key == "new-key" and wrapped.api_key == "new-key"
        assert "api_key" not in vars(wrapped)
        wrapped.chat.completions.create(model="model-a", messages=[{"role": "user", "content": "hi"}])
        assert app.seen[-1].headers["authorization"] == "Bearer new-key"
        assert rt.flush(10) and len(exp.results) == 1
    finally:
        rt.close()


def test_attributes_written_on_a_router_wrapper_reach_the_router() -> None:
    """``wrapped.fallbacks = [...]`` changes the router's fallbacks (the call falls back where the
    new setting says); ``del`` removes an attribute from the router; the wrapper's own
    attributes stay its own, and wrapping writes nothing to the router."""
    exp = RecordingExporter()
    rt = _runtime(exp)
    try:
        router = fallback_router()
        before = dict(vars(router))
        wrapped = wrap(router, runtime=rt)
        assert vars(router).keys() == before.keys()  # the wrapper's own state stayed on it
        wrapped.fallbacks = [{"primary": ["alpha"]}]
        assert router.fallbacks == [{"primary": ["alpha"]}]
        reply = wrapped.completion(model="primary", messages=[{"role": "user", "content": "f"}])
        assert reply._hidden_params["model_id"] == "dep-c"  # alpha, not the constructor's backup
        wrapped.handoffmon_probe = 1
        assert router.handoffmon_probe == 1
        del wrapped.handoffmon_probe
        assert not hasattr(router, "handoffmon_probe")
        assert rt.flush(10) and [r.record.deployment_id for r in exp.results] == ["dep-c"]
    finally:
        rt.close()


def test_a_setting_written_through_the_wrapped_litellm_module_is_litellm_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``wrap(litellm).drop_params = True`` sets LiteLLM's module setting."""
    monkeypatch.setattr(litellm, "drop_params", litellm.drop_params)  # restored after the test
    rt = _runtime()
    try:
        llm = wrap(litellm, runtime=rt)
        llm.drop_params = "sentinel"
        assert litellm.drop_params == "sentinel"
    finally:
        rt.close()


def test_a_client_wrapper_is_a_context_manager_that_stays_monitored(upstream: Any) -> None:
    """``with wrap(openai.OpenAI(...)) as c``: ``c`` is the wrapper (its calls are turns), and
    leaving the block closes the client, as the SDK's own ``with`` does."""
    _, base = upstream
    exp = RecordingExporter()
    rt = _runtime(exp)
    try:
        raw = openai.OpenAI(base_url=base, api_key="k", max_retries=0)
        with wrap(raw, runtime=rt) as client:
            assert type(client).__name__ == "OpenAIClientWrapper"
            client.chat.completions.create(model="model-a", messages=[{"role": "user", "content": "w"}])
        assert raw.is_closed()
        assert rt.flush(10) and len(exp.results) == 1
    finally:
        rt.close()


async def test_an_async_client_wrapper_is_an_async_context_manager(upstream: Any) -> None:
    _, base = upstream
    exp = RecordingExporter()
    rt = _runtime(exp)
    try:
        raw = openai.AsyncOpenAI(base_url=base, api_key="k", max_retries=0)
        async with wrap(raw, runtime=rt) as client:
            assert type(client).__name__ == "OpenAIClientWrapper"
            await client.chat.completions.create(model="model-a", messages=[{"role": "user", "content": "a"}])
        assert raw.is_closed()
        assert rt.flush(10) and len(exp.results) == 1
    finally:
        rt.close()


async def test_the_wrong_with_raises_what_the_sdk_raises(upstream: Any) -> None:
    """``async with`` on a wrapped sync client and ``with`` on a wrapped async one raise the
    ``TypeError`` the unwrapped clients raise."""
    _, base = upstream
    rt = _runtime()
    try:
        clients = (openai.OpenAI(base_url=base, api_key="k"), openai.AsyncOpenAI(base_url=base, api_key="k"))
        for raw in clients:
            wrapped = wrap(raw, runtime=rt)
            for target in (raw, wrapped):
                with pytest.raises(TypeError, match="context manager protocol"):
                    if isinstance(raw, openai.OpenAI):
                        async with target:
                            pass
                    else:
                        with target:
                            pass
    finally:
        rt.close()


@pytest.mark.parametrize("is_async", [False, True])
async def test_an_anthropic_client_wrapper_is_a_context_manager(messages_base: str, is_async: bool) -> None:
    exp = RecordingExporter()
    rt = _runtime(exp)
    try:
        messages = [{"role": "user", "content": "c"}]
        kwargs: dict[str, Any] = {"model": "claude-x", "max_tokens": 50, "messages": messages}
        if is_async:
            raw: Any = anthropic.AsyncAnthropic(base_url=messages_base, api_key="k", max_retries=0)
            async with wrap(raw, runtime=rt) as client:
                await client.messages.create(**kwargs)
        else:
            raw = anthropic.Anthropic(base_url=messages_base, api_key="k", max_retries=0)
            with wrap(raw, runtime=rt) as client:
                client.messages.create(**kwargs)
        assert type(client).__name__ == "AnthropicClientWrapper"
        assert raw.is_closed()
        assert rt.flush(10) and len(exp.results) == 1
    finally:
        rt.close()


def test_a_router_wrapper_passes_type_checks_as_its_router() -> None:
    """``isinstance(wrapped, litellm.Router)`` holds, as ``isinstance(wrapped, openai.OpenAI)``
    does for a client wrapper: code that types its router (a pydantic ``InstanceOf[Router]``
    field here, an ``assert isinstance(router, Router)`` in an application) takes the wrapper,
    and the calls made through it stay turns. ``type()`` still names the wrapper, and
    ``copy.copy`` still gives a wrapper of the same router and monitor."""
    import copy

    import pydantic

    exp = RecordingExporter()
    rt = _runtime(exp)
    try:
        router = fallback_router()
        wrapped = wrap(router, runtime=rt)
        assert isinstance(wrapped, litellm.Router) and type(wrapped).__name__ == "RouterWrapper"
        assert not isinstance(wrapped, openai.OpenAI)

        class Settings(pydantic.BaseModel):
            router: pydantic.InstanceOf[litellm.Router]

        settings = Settings(router=wrapped)
        assert settings.router is wrapped
        settings.router.completion(model="alpha", messages=[{"role": "user", "content": "typed"}])
        shallow = copy.copy(wrapped)
        assert type(shallow) is type(wrapped) and shallow.router is router and shallow.monitor is rt.monitor
        assert wrap(wrapped, runtime=rt) is wrapped  # still known as a wrapper: one layer
        assert rt.flush(10) and [r.record.deployment_id for r in exp.results] == ["dep-c"]
    finally:
        rt.close()
