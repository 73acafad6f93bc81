"""Python-heap growth of a monitor vs turns, with the attributor's bounded caches' sizes (explains soak RSS).

Run: ``.venv/bin/python -m tests.reliability.profile_caches [--conversations 40000]``.

Drives 6-turn conversations with ~45-character user messages (the proxy soak's shape)
through ``wrap(ZeroLatencyRouter)`` on a memory store capped at 50 conversations, and
prints the traced heap (tracemalloc) beside the text cache's entries and characters,
the verified-history set and the pending overlay every 30,000 turns.
"""

from __future__ import annotations

import argparse
import os
import tracemalloc
import uuid

from handoffmon.config import config_from_mapping
from handoffmon.integrations.router import RouterWrapper
from handoffmon.pipeline.monitor import Monitor
from tests.integrations.zero_router import ZeroLatencyRouter

RULE = {"name": "short", "check": "length", "params": {"unit": "words", "max": 50}}


def main() -> None:
    """Print one line per 5,000 conversations."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=40_000)
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    tracemalloc.start(1)
    config = config_from_mapping(
        {"rules": [RULE], "store": {"max_conversations": 50}, "telemetry": {"log_turns": False}}
    )
    with Monitor(config) as m:
        client = RouterWrapper(ZeroLatencyRouter({"g": ("dep-1", "openai/m1")}), m)
        base = tracemalloc.get_traced_memory()[0]
        turns = 0
        for c in range(args.conversations):
            tag = uuid.uuid4().hex
            messages = [{"role": "system", "content": "Answer briefly."}]
            for d in range(6):
                messages.append({"role": "user", "content": f"{tag} question {d}"})
                reply = client.completion(model="g", messages=messages)
                messages.append({"role": "assistant", "content": reply.choices[0].message.content})
                turns += 1
            if c % 5000 == 0:
                m.flush(60)
                a = m.attributor
                heap = (tracemalloc.get_traced_memory()[0] - base) / 2**20
                texts, pending = a._texts, len(a._pending._items)
                print(
                    f"{turns:>8} turns  heap +{heap:6.1f} MiB  text cache {len(texts):>7} entries "
                    f"{texts._chars:>9} chars  verified {len(a._verified):>7}  pending {pending}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
