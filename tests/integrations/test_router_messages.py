"""wrap(litellm.Router): ``aanthropic_messages`` monitored, streamed or not (ADR 0012).

A real ``litellm.Router`` with two groups on Anthropic deployments calls an Anthropic-shaped
upstream on loopback (``tests/proxy/messages_upstream.py``) over HTTP; its streams reach the
application as raw SSE bytes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from handoffmon.integrations.router import RouterWrapper
from handoffmon.testing import RecordingExporter
from tests.conftest import free_port
from tests.pipeline.helpers import make_config, monitor
from tests.proxy.messages_upstream import TOOL_WORDS, MessagesUpstream
from tests.proxy.mock_upstream import ServerThread

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

CONFIG = make_config(
    rules=[{"name": "no_commas", "check": "no_commas"}],
    attribution={"canonical_models": {"dep-ca": "claude-a", "dep-cb": "claude-b"}},
)


@pytest.fixture(scope="module")
def api_base() -> Iterator[str]:
    with ServerThread(MessagesUpstream(), free_port()) as srv:
        yield srv.url


def _router(api_base: str) -> Any:
    import litellm

    return litellm.Router(
        model_list=[
            {
                "model_name": group,
                "litellm_params": {"model": "anthropic/claude-x", "api_key": "k", "api_base": api_base},
                "model_info": {"id": dep},
            }
            for group, dep in (("claude-a", "dep-ca"), ("claude-b", "dep-cb"))
        ],
        num_retries=0,
    )


def _from_sse(raw: bytes) -> list[dict[str, Any]]:
    """The content blocks a Messages SSE stream carried (what an application rebuilds)."""
    blocks: dict[int, dict[str, Any]] = {}
    for line in raw.decode().splitlines():
        if not line.startswith("data: "):
            continue
        event = json.loads(line[6:])
        if event["type"] == "content_block_start":
            blocks[event["index"]] = dict(event["content_block"])
        elif event["type"] == "content_block_delta":
            block, delta = blocks[event["index"]], event["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "input_json_delta":
                block["_json"] = block.get("_json", "") + delta["partial_json"]
    for block in blocks.values():
        if "_json" in block:
            block["input"] = json.loads(block.pop("_json"))
    return [blocks[i] for i in sorted(blocks)]


@pytest.mark.parametrize("stream", [False, True])
async def test_turns_authors_and_tool_use(api_base: str, stream: bool) -> None:
    """claude-a (a tool call), claude-a (its result), claude-b, claude-a: authors from the
    serving deployment, depth, prefix and hand-off per turn, every reply sent back attributed."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp]) as m:
        wrapped = RouterWrapper(_router(api_base), m)
        history: list[Any] = [{"role": "user", "content": f"please {TOOL_WORDS} ({stream})"}]
        for i, group in enumerate(["claude-a", "claude-a", "claude-b", "claude-a"]):
            got = await wrapped.aanthropic_messages(
                model=group, max_tokens=100, messages=history, stream=stream
            )
            content = _from_sse(b"".join([c async for c in got])) if stream else got["content"]
            history.append({"role": "assistant", "content": content})
            calls = [b for b in content if b["type"] == "tool_use"]
            if calls:
                history.append(
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": calls[0]["id"], "content": "42"}],
                    }
                )
            else:
                texts = [b["text"] for b in content if b["type"] == "text"]
                assert texts and texts[0].startswith("Message ")
                history.append({"role": "user", "content": f"next {i}"})
        assert m.flush(10)
        assert m.snapshot().monitor_errors == {}
    results = exp.results
    assert [r.context.depth for r in results] == [1, 2, 3, 4]
    assert [r.record.author for r in results] == ["claude-a", "claude-a", "claude-b", "claude-a"]
    assert [r.context.prefix_model for r in results] == ["none", "claude-a", "claude-a", "claude-b"]
    assert [r.record.deployment_id for r in results] == ["dep-ca", "dep-ca", "dep-cb", "dep-ca"]
    assert all(a.method != "unknown" for r in results for a in r.context.attributions)
    assert [len(r.context.attributions) for r in results] == [0, 1, 2, 3]
    assert [c.verdict for c in results[0].checks] == ["not_applicable"]
    assert all(r.record.streamed is stream for r in results)


async def test_the_request_is_read_off_the_request_path_as_it_was_sent(api_base: str) -> None:
    """Without metadata the call's arguments are only copied on the request path and read as
    chat on the attribution thread (ADR 0002): the application appending to its list right
    after the call does not change the turn."""
    exp = RecordingExporter()
    with monitor(CONFIG, exporters=[exp], start=False) as m:
        wrapped = RouterWrapper(_router(api_base), m)
        history: list[Any] = [{"role": "user", "content": "one"}]
        got = await wrapped.aanthropic_messages(model="claude-a", max_tokens=100, messages=history)
        history += [{"role": "assistant", "content": got["content"]}, {"role": "user", "content": "two"}]
        m.start()
        assert m.flush(10)
    (result,) = exp.results
    assert (result.context.depth, result.context.prefix_model, result.record.author) == (
        1,
        "none",
        "claude-a",
    )
