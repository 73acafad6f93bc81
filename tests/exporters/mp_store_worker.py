"""Child process for the multiprocess store-counter test: a runtime on a memory store capped at
two conversations drives conversations into PROMETHEUS_MULTIPROC_DIR, then prints its store's
``evictions()``, ``stats()`` and ``operations()`` as JSON.

Usage: python -m tests.exporters.mp_store_worker N_CONVERSATIONS
"""

from __future__ import annotations

import json
import os
import sys

from handoffmon.stores.memory import MemoryStore
from tests.pipeline.helpers import run_conversation, runtime


def main(argv: list[str]) -> None:
    """Drive ``N_CONVERSATIONS`` two-turn conversations; print what the store counted."""
    assert "PROMETHEUS_MULTIPROC_DIR" in os.environ
    with runtime(store=MemoryStore(max_conversations=2)) as rt:
        for i in range(int(argv[0])):
            run_conversation(rt.monitor, ["gpt", "gpt"], user=f"hello {i}")
        assert rt.flush(30)
        store = rt.monitor.store
        counted = {"evictions": store.evictions(), "stats": store.stats(), "operations": store.operations()}  # type: ignore[attr-defined]
        print(json.dumps(counted))


if __name__ == "__main__":
    main(sys.argv[1:])
