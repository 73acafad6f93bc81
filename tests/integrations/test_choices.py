"""``n > 1``: every choice of a completion, streamed or not, is recorded as its model's, so the
next turn is attributed whichever choice the application continued with; only the first is checked.

The loopback upstream answers ``n`` distinct choices (``mock_upstream.choice_text``), interleaved
chunk by chunk when streamed. The wrapped OpenAI client and ``serve`` read a completion through
``describe_response`` and a stream through ``ChunkFolder`` + ``describe_stream``, the two places
other choices are read.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from handoffmon.attribution import Attributor
from handoffmon.ingress.chunks import MAX_ALTERNATIVES
from handoffmon.ingress.served import other_choices
from handoffmon.integrations.openai_client import OpenAIClientWrapper
from handoffmon.stores.memory import MemoryStore
from handoffmon.testing import RecordingExporter
from tests.conftest import free_port
from tests.pipeline.helpers import make_config, monitor
from tests.proxy.conftest import proxy_config, running_proxy
from tests.proxy.mock_upstream import (
    CANONICAL_MODELS,
    MockUpstream,
    ServerThread,
    choice_text,
    reply_text,
    schedule,
)
from tests.proxy.turn_counts import delta, snapshot

RULES = [{"name": "no_commas", "check": "no_commas"}]
CONFIG = make_config(rules=RULES, attribution={"canonical_models": CANONICAL_MODELS})


def _conversation(ask: Any, kept: list[int]) -> list[str]:
    """One conversation: turn ``d`` asks for 3 choices and continues with choice ``kept[d-1]``;
    returns the kept texts."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"choices {kept}"}]
    texts = []
    for depth, keep in enumerate(kept, 1):
        choices = ask(messages)
        assert choices == [choice_text(reply_text(schedule(depth), depth), i) for i in range(3)]
        texts.append(choices[keep])
        messages += [
            {"role": "assistant", "content": choices[keep]},
            {"role": "user", "content": f"n {depth}"},
        ]
    return texts


def _streamed_choices(stream: Any) -> list[str]:
    """The texts of a streamed completion's choices, by index (as an application joins them)."""
    texts: dict[int, str] = {}
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
    return [texts[i] for i in sorted(texts)]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("kept", [[2, 1, 0, 2], [0, 0, 0, 0]])
def test_a_wrapped_client_attributes_whichever_choice_was_kept(
    chat_base: str, kept: list[int], stream: bool
) -> None:
    """Four ``n=3`` turns, each continued with another choice: every earlier message attributed
    by its chained fingerprint to the model that wrote it; the rules check the first choice."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        client = OpenAIClientWrapper(openai.OpenAI(base_url=chat_base, api_key="k", max_retries=0), m)

        def ask(messages: list[dict[str, Any]]) -> list[str]:
            if stream:
                chunks = client.chat.completions.create(model="gpt-x", messages=messages, n=3, stream=True)
                return _streamed_choices(chunks)
            done = client.chat.completions.create(model="gpt-x", messages=messages, n=3)
            return [str(c.message.content) for c in done.choices]

        _conversation(ask, kept)
        assert m.flush(10)
        assert m.snapshot().monitor_errors == {}
    results = exp.results
    assert [r.context.depth for r in results] == [1, 2, 3, 4]
    authors = [r.record.author for r in results]
    assert authors == [schedule(d) for d in (1, 2, 3, 4)]
    assert [r.context.prefix_model for r in results] == ["none", *authors[:-1]]
    assert [[a.method for a in r.context.attributions] for r in results] == [["chain"] * d for d in range(4)]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_serve_attributes_whichever_choice_was_kept(stream: bool) -> None:
    """The same through ``serve`` (JSON replies read on the attribution thread, streams folded
    as they pass)."""
    upstream = MockUpstream()
    with ServerThread(upstream, free_port()) as srv:
        cfg = proxy_config(srv.url, rules=RULES, attribution={"canonical_models": CANONICAL_MODELS})
        with running_proxy(cfg) as proxy:
            before = snapshot(proxy)

            def ask(messages: list[dict[str, Any]]) -> list[str]:
                client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0)
                if stream:
                    return _streamed_choices(
                        client.chat.completions.create(model="gpt-x", messages=messages, n=3, stream=True)
                    )
                r = httpx.post(
                    f"{proxy.url}/v1/chat/completions",
                    json={"model": "gpt-x", "messages": messages, "n": 3},
                    timeout=30,
                )
                return [c["message"]["content"] for c in r.json()["choices"]]

            _conversation(ask, [1, 2, 1])
            after = snapshot(proxy)
    assert delta(after.attributions, before.attributions) == {"chain": 0 + 1 + 2}


def test_other_choices_are_bounded_and_identical_ones_recorded_once() -> None:
    """A hostile ``n`` records at most ``MAX_ALTERNATIVES`` more keys; a choice equal to the first
    adds none; unreadable choices are skipped."""
    first = {"role": "assistant", "content": "the first choice, long enough for a content key"}
    doc = {
        "choices": [
            {"message": first},
            {"message": dict(first)},
            {"message": None},
            "junk",
            *({"message": {"role": "assistant", "content": f"other {i} " * 8}} for i in range(200)),
        ]
    }
    alternatives = other_choices(doc)
    assert len(alternatives) == MAX_ALTERNATIVES - 2  # the slice holds 16; two of them are unreadable
    assert alternatives[0] == first
    attributor = Attributor(MemoryStore())
    ctx = attributor.attribute([{"role": "user", "content": "q"}])
    alone = attributor.record(ctx, first, ["atlas"])
    both = attributor.record(ctx, first, ["atlas"], alternatives=alternatives)
    assert len(both.items) == len(alone.items) + 2 * (len(alternatives) - 1)  # chain + content key each


def test_a_wrapped_router_attributes_whichever_streamed_choice_was_kept(chat_base: str) -> None:
    """A real ``litellm.Router`` streams the upstream's interleaved choices through its own
    stream wrapper (each chunk's index kept): the wrapped Router folds them like the client."""
    import os

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    from handoffmon.integrations.router import RouterWrapper

    router = litellm.Router(
        model_list=[
            {
                "model_name": "g",
                "litellm_params": {"model": "openai/gpt-x", "api_key": "k", "api_base": chat_base},
                "model_info": {"id": "dep-x"},
            }
        ],
        num_retries=0,
    )
    exp = RecordingExporter()
    config = make_config(rules=RULES, attribution={"canonical_models": {"dep-x": "model-x"}})
    with monitor(config, exporters=[exp]) as m:
        wrapped = RouterWrapper(router, m)

        def ask(messages: list[dict[str, Any]]) -> list[str]:
            return _streamed_choices(wrapped.completion(model="g", messages=messages, n=3, stream=True))

        _conversation(ask, [2, 1, 0, 2])
        assert m.flush(10)
        assert m.snapshot().monitor_errors == {}
    results = exp.results
    assert [r.record.author for r in results] == ["model-x"] * 4
    assert [r.context.prefix_model for r in results] == ["none", "model-x", "model-x", "model-x"]
    assert [[a.method for a in r.context.attributions] for r in results] == [["chain"] * d for d in range(4)]
