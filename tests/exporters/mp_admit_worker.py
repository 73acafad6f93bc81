"""Child process for the label-admission restart test: a guard on PROMETHEUS_MULTIPROC_DIR maps
model names and prints their labels as a JSON list.

Usage: python -m tests.exporters.mp_admit_worker CAP NAMES   (NAMES comma-separated)
"""

from __future__ import annotations

import json
import os
import sys

from handoffmon.labels import LabelGuard


def main(argv: list[str]) -> None:
    """Map every name of ``NAMES`` under a ``CAP``-model guard; print the labels."""
    assert "PROMETHEUS_MULTIPROC_DIR" in os.environ
    guard = LabelGuard(max_models=int(argv[0]))
    print(json.dumps([guard.model(name) for name in argv[1].split(",")]))


if __name__ == "__main__":
    main(sys.argv[1:])
