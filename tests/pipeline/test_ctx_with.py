"""CheckStage's context copy equals ``dataclasses.replace`` (it skips ``__init__``, which only assigns)."""

from __future__ import annotations

import dataclasses

from handoffmon.pipeline.check_stage import _ctx_with
from handoffmon.testing import make_turn_result


def test_ctx_with_equals_dataclasses_replace() -> None:
    ctx = make_turn_result(metadata={"route": "r"}).context
    ctx = dataclasses.replace(ctx, user_message="hello", input_messages=())
    got = _ctx_with(ctx, user_message="", input_messages=())
    assert got == dataclasses.replace(ctx, user_message="", input_messages=())
    assert got is not ctx and ctx.user_message == "hello"
    assert _ctx_with(ctx, conversation_id="other") == dataclasses.replace(ctx, conversation_id="other")
