"""A Messages API answer without a reply is no turn in ``wrap(anthropic client)``, counted.

As a Responses API answer ``failed`` or ``incomplete`` without output is
(``test_responses_no_reply.py``): recorded, it would be an empty reply failing every rule,
charged to the model for what the upstream did. Counted by status instead
(``RecordingExporter.no_replies``; ``handoffmon_responses_without_reply_total``):

- ``refusal``: ``stop_reason: "refusal"`` before any text (the API's classifier stopped it);
- ``incomplete``: ``max_tokens`` with nothing but thinking;
- ``error``: a stream the API ended with an ``error`` event before any text (the SDK raises it
  to the application; the wrapper never sees the event).

A turn still: a refusal that says something, an ``end_turn`` with ``content: []`` (what the
model chose to say), and a stream broken off after some text or cut before ``message_stop``
(a cut-off turn: rules ``not_applicable``, reason ``incomplete``).

The real ``anthropic`` SDK talks HTTP to ``tests/proxy/messages_upstream.py``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import anthropic
import pytest

from handoffmon.integrations.anthropic_client import AnthropicClientWrapper
from handoffmon.testing import RecordingExporter
from tests.integrations.test_anthropic_client import MODES, _ask
from tests.pipeline.helpers import make_config, monitor

CONFIG = make_config(
    rules=[{"name": "says_enough", "check": "length", "params": {"unit": "words", "min": 3}}]
)
STREAMS = [m for m in MODES if m not in ("sync", "async")]


def _client(base: str, mode: str, m: Any) -> AnthropicClientWrapper:
    cls = anthropic.AsyncAnthropic if mode.startswith("a") else anthropic.Anthropic
    return AnthropicClientWrapper(cls(base_url=base, api_key="k", max_retries=0), m)


async def _run(base: str, mode: str, headers: dict[str, str]) -> tuple[Any, RecordingExporter]:
    """One call in ``mode`` with the upstream's ``headers``: (the message or the exception the
    application got, what was exported)."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = _client(base, mode, m)
        try:
            got: Any = await _ask(
                wrapped,
                mode,
                model="claude-x",
                messages=[{"role": "user", "content": mode}],
                extra_headers=headers,
            )
        except anthropic.APIError as exc:
            got = exc
        assert m.flush(10)
    return got, exp


def _checks(exp: RecordingExporter) -> list[tuple[str, str, str | None]]:
    return [(c.rule, c.verdict, c.reason or None) for r in exp.results for c in r.checks]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"x-mock-stop-reason": "refusal", "x-mock-content": "empty"}, "refusal"),
        ({"x-mock-stop-reason": "refusal", "x-mock-content": "thinking"}, "refusal"),
        ({"x-mock-stop-reason": "max_tokens", "x-mock-content": "thinking"}, "incomplete"),
    ],
)
async def test_an_answer_stopped_before_any_text_is_no_turn_counted(
    messages_base: str, mode: str, headers: dict[str, str], status: str
) -> None:
    got, exp = await _run(messages_base, mode, headers)
    assert got.stop_reason == headers["x-mock-stop-reason"]
    assert not [b for b in got.content if b.type == "text"]  # the application got no text either
    assert exp.results == []
    assert exp.no_replies == Counter({status: 1})


@pytest.mark.parametrize("mode", MODES)
async def test_a_refusal_that_says_something_is_a_turn(messages_base: str, mode: str) -> None:
    got, exp = await _run(messages_base, mode, {"x-mock-stop-reason": "refusal"})
    assert got.stop_reason == "refusal"
    assert _checks(exp) == [("says_enough", "pass", None)]
    assert exp.results[0].record.finish_reason == "content_filter"
    assert exp.no_replies == Counter()


@pytest.mark.parametrize("mode", MODES)
async def test_an_end_turn_with_empty_content_is_a_turn(messages_base: str, mode: str) -> None:
    """What the model chose to say, as a Responses API answer ``completed`` without output."""
    got, exp = await _run(messages_base, mode, {"x-mock-content": "empty"})
    assert got.stop_reason == "end_turn" and got.content == []
    assert [c.verdict for r in exp.results for c in r.checks] == ["fail"]
    assert exp.no_replies == Counter()


@pytest.mark.parametrize("mode", STREAMS)
@pytest.mark.parametrize("after", ["0", "6"])
async def test_a_stream_the_api_ends_with_an_error_before_any_text_is_no_turn(
    messages_base: str, mode: str, after: str
) -> None:
    """``error`` first (the wrapper saw no event at all), or after ``message_start``, ``ping``
    and the thinking block: the SDK raises it."""
    got, exp = await _run(messages_base, mode, {"x-mock-error-after": after})
    assert isinstance(got, anthropic.APIStatusError) and "overloaded_error" in str(got)
    assert exp.results == []
    assert exp.no_replies == Counter({"error": 1})


@pytest.mark.parametrize("mode", STREAMS)
async def test_a_stream_the_api_ends_with_an_error_after_some_text_is_a_cut_off_turn(
    messages_base: str, mode: str
) -> None:
    got, exp = await _run(messages_base, mode, {"x-mock-error-after": "9"})
    assert isinstance(got, anthropic.APIStatusError)
    assert _checks(exp) == [("says_enough", "not_applicable", "incomplete")]
    assert exp.results[0].record.reply_chars > 0  # the text before the error
    assert exp.no_replies == Counter()


@pytest.mark.parametrize("mode", ["stream", "astream"])
@pytest.mark.parametrize("cut", ["2", "9"])
async def test_a_stream_cut_before_message_stop_is_a_cut_off_turn(
    messages_base: str, mode: str, cut: str
) -> None:
    """The HTTP body ends cleanly after ``cut`` events (no text yet, or some): the SDK's
    iterator just stops. Without ``message_stop`` it is no complete reply: a cut-off turn, not
    an empty or short reply every rule judges."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = _client(messages_base, mode, m)
        kwargs: dict[str, Any] = {
            "model": "claude-x",
            "max_tokens": 100,
            "messages": [{"role": "user", "content": mode}],
            "extra_headers": {"x-mock-cut-after": cut},
            "stream": True,
        }
        if mode == "stream":
            events = list(wrapped.messages.create(**kwargs))
        else:
            events = [e async for e in await wrapped.messages.create(**kwargs)]
        assert events and events[-1].type != "message_stop"  # (the SDK drops the ping)
        assert m.flush(10)
    assert _checks(exp) == [("says_enough", "not_applicable", "incomplete")]
    assert exp.no_replies == Counter()
