"""wrap(openai.OpenAI / AsyncOpenAI): the structured-output helpers ``chat.completions.parse``
and ``responses.parse`` are turns like ``create``'s (the SDK posts them without ``create``).

The real SDK talks HTTP to the loopback upstreams, which answer a ``json_schema`` format with
JSON; the parsed object reaches the application unchanged and a JSON rule checks the reply.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from handoffmon.integrations.openai_client import OpenAIClientWrapper
from handoffmon.testing import RecordingExporter
from tests.pipeline.helpers import make_config, monitor
from tests.proxy.mock_upstream import CANONICAL_MODELS, Answer, reply_text, schedule
from tests.proxy.responses_upstream import responses_text

CONFIG = make_config(
    rules=[{"name": "is_json", "check": "json_schema", "params": {"schema": {"required": ["answer"]}}}],
    attribution={"canonical_models": CANONICAL_MODELS},
)


def _client(base: str, is_async: bool) -> Any:
    cls = openai.AsyncOpenAI if is_async else openai.OpenAI
    return cls(base_url=base, api_key="k", max_retries=0)


async def _maybe(value: Any) -> Any:
    return await value if hasattr(value, "__await__") else value


@pytest.mark.parametrize("is_async", [False, True])
async def test_chat_completions_parse_is_a_turn(chat_base: str, is_async: bool) -> None:
    """Three ``parse`` calls, the parsed replies sent back as assistant messages: three turns
    with depth, author, prefix and the earlier replies attributed; the JSON rule passes."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = OpenAIClientWrapper(_client(chat_base, is_async), m)
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"structured {is_async}"}]
        for depth in (1, 2, 3):
            done = await _maybe(
                wrapped.chat.completions.parse(model="gpt-x", messages=messages, response_format=Answer)
            )
            parsed = done.choices[0].message.parsed
            assert isinstance(parsed, Answer) and parsed == Answer(
                answer=reply_text(schedule(depth), depth), depth=depth
            )
            messages += [
                {"role": "assistant", "content": done.choices[0].message.content},
                {"role": "user", "content": f"next {depth}"},
            ]
        assert m.flush(10)
        assert m.snapshot().monitor_errors == {}
    results = exp.results
    assert [r.context.depth for r in results] == [1, 2, 3]
    assert [r.record.author for r in results] == [schedule(1), schedule(2), schedule(3)]
    assert [r.context.prefix_model for r in results] == ["none", schedule(1), schedule(2)]
    assert all(a.method == "chain" for r in results for a in r.context.attributions)
    assert [c.verdict for r in results for c in r.checks] == ["pass"] * 3


@pytest.mark.parametrize("is_async", [False, True])
async def test_responses_parse_is_a_turn(responses_base: str, is_async: bool) -> None:
    """``responses.parse`` calls chained by ``previous_response_id``: turns at their depth, the
    parsed output unchanged, the JSON rule passing."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = OpenAIClientWrapper(_client(responses_base, is_async), m)
        previous: str | None = None
        for depth in (1, 2, 3):
            extra: dict[str, Any] = {"previous_response_id": previous} if previous else {}
            done = await _maybe(
                wrapped.responses.parse(
                    model="gpt-x", input=f"parse {is_async} {depth}", text_format=Answer, **extra
                )
            )
            assert done.output_parsed == Answer(answer=responses_text(schedule(depth), depth), depth=depth)
            previous = done.id
        assert m.flush(10)
        assert m.snapshot().monitor_errors == {}
    results = exp.results
    assert [r.context.depth for r in results] == [1, 2, 3]
    assert [r.record.author for r in results] == [schedule(1), schedule(2), schedule(3)]
    assert [c.verdict for r in results for c in r.checks] == ["pass"] * 3
