"""Wrap an OpenAI SDK client (offline: the upstream is an httpx MockTransport) and print what was recorded.

Run: ``python examples/wrap_openai_client.py``. The fake upstream answers like a LiteLLM
Proxy would, with ``x-litellm-model-id`` / ``x-litellm-model-name`` / attempted-fallback
headers, which handoffmon reads to name the author. Point ``base_url`` at your real
LiteLLM Proxy (or any OpenAI-compatible server) and drop ``http_client`` to use it for real.
"""

from __future__ import annotations

import json

import httpx
import openai

import handoffmon
from handoffmon.config import config_from_mapping


def fake_upstream(request: httpx.Request) -> httpx.Response:
    """Every third request 'falls back' to model b; replies say which turn they answer."""
    body = json.loads(request.content)
    turn = sum(1 for m in body["messages"] if m["role"] == "assistant") + 1
    model = "openai/gpt-b" if turn % 3 == 0 else "openai/gpt-a"
    headers = {
        "x-litellm-model-id": model.replace("openai/", "dep-"),
        "x-litellm-model-name": model,
        "x-litellm-attempted-fallbacks": "1" if turn % 3 == 0 else "0",
    }
    text = f"Answer to turn {turn}."
    if body.get("stream"):
        chunk = {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}],
        }
        sse = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n"
        return httpx.Response(200, headers={**headers, "content-type": "text/event-stream"}, content=sse)
    return httpx.Response(
        200,
        headers=headers,
        json={
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
        },
    )


def main() -> None:
    client = openai.OpenAI(
        api_key="sk-anything",
        base_url="http://litellm-proxy.invalid/v1",
        http_client=httpx.Client(transport=httpx.MockTransport(fake_upstream)),
    )
    config = config_from_mapping(
        {"attribution": {"canonical_models": {"openai/gpt-a": "a", "openai/gpt-b": "b"}}}
    )
    wrapped = handoffmon.wrap(client, config)  # handoffmon's series join prometheus_client's registry

    messages = [{"role": "user", "content": "Hi"}]
    for i in range(5):
        if i == 1:
            stream = wrapped.chat.completions.create(model="my-group", messages=messages, stream=True)
            text = "".join(c.choices[0].delta.content or "" for c in stream)
        else:
            reply = wrapped.chat.completions.create(model="my-group", messages=messages)
            text = reply.choices[0].message.content
        print(f"turn {i + 1}: {text}")
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "And then?"}]

    wrapped.runtime.close()  # drains the queue; also runs at exit
    counts = wrapped.monitor.snapshot()
    print(
        f"recorded {counts.total_turns} turns; attributions of earlier messages: {dict(counts.attributions)}"
    )
    for key, n in sorted(counts.turns.items(), key=lambda kv: kv[0].depth_bucket):
        print(
            f"  author {key.model} after {key.prefix_model:<5} depth {key.depth_bucket:<4} "
            f"handoff {key.handoff}: {n}"
        )


if __name__ == "__main__":
    main()
