"""Wrap a litellm.Router (offline: mock responses) and print what handoffmon recorded per turn.

Run: ``python examples/wrap_router.py``. Group ``fast`` is served by gpt-a. Group
``primary`` (gpt-x) always rate-limits, so the router falls back to ``backup`` (gpt-b):
turns 3-4 ask for ``primary`` and are written by gpt-b, between turns by gpt-a —
handoffs at turns 3 and 5, attributed to the deployment that really answered.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network for the cost map

from litellm import Router

import handoffmon
from handoffmon.config import config_from_mapping
from handoffmon.types import TurnResult


class PrintExporter:
    """An exporter that prints one line per finished turn."""

    def export(self, result: TurnResult) -> bool:
        r, c = result.record, result.context
        checks = ", ".join(f"{x.rule}={x.verdict}" for x in result.checks)
        print(
            f"depth {c.depth:>2}  author {r.author:<8} prefix {c.prefix_model:<8} handoff {r.handoff!s:<5} "
            f"deployment {r.deployment_id}  fallbacks {r.fallbacks}  streamed {r.streamed!s:<5}  {checks}"
        )
        return True

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        return True

    def shutdown(self) -> None:
        pass


def main() -> None:
    router = Router(
        model_list=[
            {
                "model_name": "fast",
                "litellm_params": {"model": "openai/gpt-a", "api_key": "k", "mock_response": "Sure, done."},
                "model_info": {"id": "dep-a"},
            },
            {
                "model_name": "primary",
                "litellm_params": {
                    "model": "openai/gpt-x",
                    "api_key": "k",
                    "mock_response": "litellm.RateLimitError",
                },
                "model_info": {"id": "dep-x"},
            },
            {
                "model_name": "backup",
                "litellm_params": {
                    "model": "openai/gpt-b",
                    "api_key": "k",
                    "mock_response": "Backup model here, answering at length.",
                },
                "model_info": {"id": "dep-b"},
            },
        ],
        fallbacks=[{"primary": ["backup"]}],
        num_retries=0,
    )
    config = config_from_mapping(
        {
            "attribution": {"canonical_models": {"openai/gpt-a": "model-a", "openai/gpt-b": "model-b"}},
            "rules": [{"name": "brief", "check": "length", "params": {"unit": "words", "max": 5}}],
        }
    )
    # the runtime exports to Prometheus (prometheus_client's registry) as usual, and to PrintExporter
    runtime = handoffmon.build_runtime(config, exporters=[PrintExporter()])
    client = handoffmon.wrap(router, runtime=runtime)  # same call surface as the router

    messages = [{"role": "user", "content": "Hello!"}]
    plan = ["fast", "fast", "primary", "primary", "fast"]
    for i, group in enumerate(plan):
        if i == 4:  # one streamed turn
            stream = client.completion(model=group, messages=messages, stream=True)
            text = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
        else:
            text = client.completion(model=group, messages=messages).choices[0].message.content
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"Question {i + 2}"}]

    runtime.close()  # drains the background queue (exporters print as turns finish)
    counts = runtime.monitor.snapshot()
    print(
        f"turns counted: {counts.total_turns}, handoff turns: "
        f"{sum(n for k, n in counts.turns.items() if k.handoff == 'true')}, dropped: {counts.dropped}"
    )
    for key, n in sorted(counts.turns.items()):
        print(
            f"  turns[model={key.model}, prefix={key.prefix_model}, depth={key.depth_bucket}, "
            f"handoff={key.handoff}] = {n}"
        )


if __name__ == "__main__":
    main()
