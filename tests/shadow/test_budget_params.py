"""The budget's bound of a shadow call counts the generation parameters it repeats: a served
request's ``response_format`` schema is sent with the history and read as prompt."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pydantic

from handoffmon.config import ShadowConfig
from handoffmon.runtime.shadow import ShadowRunner
from handoffmon.shadow.turns import ShadowReply, ShadowTurn, WithRequestParams, offer_of, params_bytes
from handoffmon.types import CheckResult

SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "answer",
        "schema": {"type": "object", "properties": {f"field_{i}": {"type": "string"} for i in range(800)}},
    },
}
"""A 26 KB structured-output schema."""
MAX_OUTPUT = 256


class _Target:
    """Uses one token per byte it was sent (messages and parameters as JSON, 4 per message) plus
    its whole output allowance: the most a byte-level BPE tokenizer can charge."""

    def __init__(self) -> None:
        self.calls = 0

    def call(
        self, target: str, messages: list[Any], *, max_tokens: int, timeout_s: float, params: Any = None
    ) -> ShadowReply:
        self.calls += 1
        sent = sum(len(json.dumps(m, ensure_ascii=False).encode()) + 4 for m in messages)
        sent += len(json.dumps(params or {}, ensure_ascii=False).encode())
        return ShadowReply("{}", target, float(sent + max_tokens), None)

    def candidates(self, model: str) -> Sequence[str]:
        return ("b",)

    def prices(self, model: str) -> tuple[float, float] | None:
        return None


def test_the_tokens_window_holds_with_a_large_response_format() -> None:
    """Turns of one conversation each, every one carrying a 26 KB ``response_format``, offered one
    after another (each settled before the next): the tokens window never passes 30,000. Bounding
    the history alone (482 tokens) admitted a second call on top of the first's 26,917 (53,834)."""
    cfg = ShadowConfig(
        enabled=True, targets=["b"], sample_rate=1.0, calls_per_minute=1000, tokens_per_hour=30_000,
        usd_per_day=None, pair_calls_per_hour=1000, max_output_tokens=MAX_OUTPUT,
    )  # fmt: skip
    target, runner = _Target(), ShadowRunner(cfg)
    request = {"response_format": SCHEMA, "temperature": 0.0}
    seen = []
    for i in range(5):
        messages = [{"role": "user", "content": "q" * 150}, {"role": "assistant", "content": "a"}]
        offer = offer_of(target, messages, request=request)
        served = (CheckResult("r", "pass"),)
        runner.offer(ShadowTurn(offer, f"conv-{i}", "a", "a", served, lambda _t: (CheckResult("r", "fail"),)))
        assert runner.flush(5)
        seen.append(runner.policy.budget.usage()[0]["tokens"])
    runner.close(5)
    assert target.calls == 1, (target.calls, seen)
    assert max(seen) <= 30_000, seen
    assert runner.stats.skipped == {"budget_tokens": 4}


class Answer(pydantic.BaseModel):
    text: str


def test_params_bytes_counts_what_is_sent() -> None:
    """Only a request-params source adds bytes; a pydantic type counts as its JSON schema."""
    target = _Target()
    assert params_bytes(target) == 0
    plain = WithRequestParams(target, {"temperature": 0.5, "api_key": "sk-long-secret-key"})
    assert params_bytes(plain) == len(b'{"temperature": 0.5}')
    typed = WithRequestParams(target, {"response_format": Answer})
    assert params_bytes(typed) == len(json.dumps({"response_format": Answer.model_json_schema()}).encode())
