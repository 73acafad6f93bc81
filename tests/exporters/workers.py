"""Running the ``tests.exporters.mp_*`` worker modules as real processes on one multiprocess directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def worker_said(mp_dir: Path, module: str, *args: str) -> str:
    """The last line a ``tests.exporters.<module>`` child process writing ``mp_dir`` printed
    (``""``: none)."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(mp_dir), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", f"tests.exporters.{module}", *args]
    done = subprocess.run(argv, env=env, cwd=ROOT, check=True, capture_output=True, text=True)
    return ["", *done.stdout.strip().splitlines()][-1]
