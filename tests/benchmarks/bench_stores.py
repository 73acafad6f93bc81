"""Store footprint: bytes per tracked turn of the memory, SQLite and Redis stores (issue 21:
the memory store ≤ 200 B per tracked turn).

Run: ``.venv/bin/python -m tests.benchmarks.bench_stores [--quick]``.

The measurement is ``bench_scaling.store_memory``: 10-turn conversations written through the
real Attributor (a chain and a content key per reply, one conversation state per
conversation); memory = Python heap growth (tracemalloc), SQLite = file bytes, Redis =
``used_memory`` of a private ``redis-server`` (skipped without the binary).
"""

from __future__ import annotations

import argparse
import os

from tests.benchmarks.bench_scaling import store_memory


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1,000 and 5,000 turns only")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for row in store_memory(args.quick):
        print(f"{row['store']:8s} {row['turns']:>7,} turns {row['bytes_per_turn']:8.1f} B/turn")


if __name__ == "__main__":
    main()
