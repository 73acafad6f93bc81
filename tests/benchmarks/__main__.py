"""``python -m tests.benchmarks``: run every benchmark (see ``tests/benchmarks/runner.py``)."""

from __future__ import annotations

import sys

from tests.benchmarks.runner import main

sys.exit(main())
