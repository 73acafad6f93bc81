"""``wrap(litellm)``: the module's batch helpers make monitored turns.

``litellm.batch_completion`` (one model, many requests), ``batch_completion_models`` (one request,
several models, the first answer returned) and ``batch_completion_models_all_responses`` call
``litellm.completion`` themselves; reached through the wrapper's attribute pass-through they
were litellm's own functions, so none of their calls was a turn.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
litellm = pytest.importorskip("litellm")

from handoffmon.integrations.router import RouterWrapper  # noqa: E402
from handoffmon.testing import RecordingExporter  # noqa: E402
from tests.pipeline.helpers import make_config, monitor  # noqa: E402

ASK = [{"role": "user", "content": "batch question"}]


def _text(response: Any) -> str:
    return str(response.choices[0].message.content)


def _turns(exp: RecordingExporter) -> list[tuple[str | None, int, str]]:
    return sorted((r.record.author, r.context.depth, r.context.prefix_model) for r in exp.results)


def test_batch_completion_calls_are_turns_with_litellms_answers() -> None:
    """One model, two requests: two turns, the answers litellm gives unwrapped; the second
    request's history is attributed to the first's reply."""
    exp = RecordingExporter()
    follow = [*ASK, {"role": "assistant", "content": "one"}, {"role": "user", "content": "more"}]
    kwargs: dict[str, Any] = {"model": "openai/gpt-x", "api_key": "k", "mock_response": "one"}
    with monitor(make_config(), exporters=[exp]) as m:
        llm = RouterWrapper(litellm, m)
        assert _text(llm.completion(messages=ASK, **kwargs)) == "one"
        m.flush(10)
        answers = llm.batch_completion(messages=[ASK, follow], **kwargs)
        direct = litellm.batch_completion(messages=[ASK, follow], **kwargs)
        assert [type(a) for a in answers] == [type(d) for d in direct]
        assert [_text(a) for a in answers] == [_text(d) for d in direct] == ["one", "one"]
        m.flush(10)
    assert _turns(exp) == [("openai/gpt-x", 1, "none")] * 2 + [("openai/gpt-x", 2, "openai/gpt-x")]


def test_batch_completion_models_calls_are_turns() -> None:
    """One request to two models: each call litellm makes is a turn of its model, whether the
    helper returns the first answer or all of them."""
    exp = RecordingExporter()
    models = ["openai/gpt-a", "openai/gpt-b"]
    kwargs: dict[str, Any] = {"messages": ASK, "api_key": "k", "mock_response": "hi"}
    with monitor(make_config(), exporters=[exp]) as m:
        llm = RouterWrapper(litellm, m)
        first = llm.batch_completion_models(models=models, **kwargs)
        assert _text(first) == "hi"
        every = llm.batch_completion_models_all_responses(models=models, **kwargs)
        assert [_text(r) for r in every] == ["hi", "hi"]
        m.flush(10)
    assert _turns(exp) == sorted([(f"openai/gpt-{x}", 1, "none") for x in "ab"] * 2)


def test_the_helpers_stay_litellms_for_a_router() -> None:
    """A Router has no such helpers: the wrapper adds none (``AttributeError`` as unwrapped)."""
    from litellm import Router

    with monitor(make_config()) as m:
        wrapped = RouterWrapper(Router(model_list=[]), m)
        with pytest.raises(AttributeError):
            wrapped.batch_completion  # noqa: B018


def _one_call(**kwargs: Any) -> Any:
    """A stand-in for a batch helper: calls ``litellm.completion`` through its module's globals."""
    return litellm.completion(**kwargs)


def test_a_helper_is_made_once_and_again_when_litellm_replaces_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wrapper keeps the copy of a helper (it cost 9 µs per attribute read) while
    ``litellm.<helper>`` is the same function; a helper replaced after the first read (a
    monkeypatch, an instrumentation library) gives a new copy calling through the wrapper."""
    exp = RecordingExporter()
    kwargs: dict[str, Any] = {
        "model": "openai/gpt-x",
        "api_key": "k",
        "mock_response": "one",
        "messages": ASK,
    }
    with monitor(make_config(), exporters=[exp]) as m:
        llm = RouterWrapper(litellm, m)
        first = llm.batch_completion
        assert llm.batch_completion is first and first is not litellm.batch_completion
        assert llm.batch_completion_models is not first
        other = copy.copy(llm)  # shares the wrapper's dict of kept helpers: each calls its own wrapper
        assert other.batch_completion.__globals__["litellm"].completion.__self__ is other
        assert llm.batch_completion.__globals__["litellm"].completion.__self__ is llm
        first = llm.batch_completion
        monkeypatch.setattr(litellm, "batch_completion", _one_call)
        replaced = llm.batch_completion
        assert replaced is not first and replaced.__wrapped__ is _one_call
        assert _text(replaced(**kwargs)) == "one"
        m.flush(10)
    assert _turns(exp) == [("openai/gpt-x", 1, "none")]


def test_a_kept_helper_reads_its_modules_names_as_they_are_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """A name the helper's module rebinds after the copy was made (its ``ThreadPoolExecutor``,
    patched to count) is the one the kept copy uses, as litellm's own helper does: the copy's
    globals are read live, not a snapshot that the kept copy would carry on with."""
    import sys

    module = sys.modules[litellm.batch_completion.__module__]
    pools: list[Any] = []

    class Counted(module.ThreadPoolExecutor):  # type: ignore[misc,name-defined]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            pools.append(self)

    kwargs: dict[str, Any] = {"model": "openai/gpt-x", "api_key": "k", "mock_response": "one"}
    with monitor(make_config()) as m:
        llm = RouterWrapper(litellm, m)
        kept = llm.batch_completion
        monkeypatch.setattr(module, "ThreadPoolExecutor", Counted)
        assert llm.batch_completion is kept
        assert [_text(a) for a in kept(messages=[ASK], **kwargs)] == ["one"]
        assert len(pools) == 1
