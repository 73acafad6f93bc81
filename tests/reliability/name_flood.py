"""Name flood (run as a subprocess): every request brings new model, rule and conversation names.

``python -m tests.reliability.name_flood REQUESTS [small]`` sends REQUESTS chat
completions through ``wrap(router)`` into a runtime built as an application builds it
(Prometheus exporter, memory store, periodic refit every 5 s; ``small``: the caps below).
The router stands in for LiteLLM and the LLM behind it: it answers every call with a
real ``litellm.ModelResponse`` from model ``model-i`` (the SDK and HTTP costs of a real
call are not handoffmon's and would make 200k requests take hours here). Request ``i``
asks for model group ``group-i``,
declares a rule ``rule-i`` in ``metadata.handoffmon.rules`` and continues conversation
``conv-i`` (one earlier assistant message, so attribution looks the prefix up).
Resident memory is sampled every tenth of the run; one JSON line goes to stdout:
``rss_mib`` (samples), ``peak_mib`` (ru_maxrss), the distinct names in the aggregates, the
label guard's usage and overflows, and the refits that ran.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

MIB = 2**20


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class FloodRouter:
    """``completion`` answers ``group-i`` as ``model-i`` (a new model name per request)."""

    def completion(self, model: str, messages: list[Any], **kwargs: Any) -> Any:
        from litellm import ModelResponse

        i = model.removeprefix("group-")
        return ModelResponse(
            model=f"model-{i}",
            choices=[
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": f"answer {i}"},
                    "finish_reason": "stop",
                }
            ],
        )

    async def acompletion(self, model: str, messages: list[Any], **kwargs: Any) -> Any:
        return self.completion(model, messages, **kwargs)


SMALL = {
    "store": {"backend": "memory", "max_conversations": 500},
    "attribution": {"pending_max": 500, "text_cache_bytes": 1_000_000},
}
"""Caps small enough that every bounded structure fills within the first thousand requests."""
DEFAULTS: dict[str, Any] = {"store": {"backend": "memory"}}
"""The shipped defaults (100,000 conversations, 100,000 pending replies, 16 MB of text)."""


def main(requests: int, caps: dict[str, Any]) -> dict[str, Any]:
    from prometheus_client import CollectorRegistry

    from handoffmon.config import config_from_mapping
    from handoffmon.integrations import wrap
    from handoffmon.runtime import build_runtime

    config = config_from_mapping({**caps, "refit": {"interval_s": 5}, "telemetry": {"log_turns": False}})
    runtime = build_runtime(config, registry=CollectorRegistry())
    client = wrap(FloodRouter(), runtime=runtime)
    samples: list[float] = [rss_bytes() / MIB]
    step = max(1, requests // 10)
    t0 = time.monotonic()
    for i in range(requests):
        client.completion(
            model=f"group-{i}",
            messages=[
                {"role": "user", "content": f"conv-{i} first"},
                {"role": "assistant", "content": f"earlier answer of conv-{i}"},
                {"role": "user", "content": "and then?"},
            ],
            metadata={"handoffmon": {"rules": [{"name": f"rule-{i}", "check": "no_commas"}]}},
            headers={"x-conversation-id": f"conv-{i}"},
        )
        if i == min(99, requests - 1):  # warm-up: the first refit imports scipy (tens of MiB)
            runtime.monitor.flush(60)
            runtime.refit_now()
        if (i + 1) % step == 0:
            runtime.monitor.flush(60)
            samples.append(rss_bytes() / MIB)
    runtime.monitor.flush(60)
    elapsed = time.monotonic() - t0
    snap = runtime.monitor.snapshot()
    guard = runtime.monitor.aggregates.guard
    refit = runtime.refit.stats if runtime.refit is not None else None
    report = {
        "requests": requests,
        "seconds": round(elapsed, 1),
        "rss_mib": [round(s, 1) for s in samples],
        "peak_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "turns": snap.total_turns,
        "dropped": snap.dropped,
        "models": len({k.model for k in snap.turns} | {k.prefix_model for k in snap.turns}),
        "rules": len({k.rule for k in snap.checks}),
        "label_usage": {k: list(v) for k, v in guard.usage().items()},
        "label_overflows": guard.overflows(),
        "monitor_errors": dict(snap.monitor_errors),
        "refits": None if refit is None else {"runs": refit.runs, "failures": refit.failures},
    }
    runtime.close()
    return report


if __name__ == "__main__":
    n = int(sys.argv[1])
    small = len(sys.argv) > 2 and sys.argv[2] == "small"
    print(json.dumps(main(n, SMALL if small else DEFAULTS)), flush=True)
