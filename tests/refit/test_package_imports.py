"""Import cost: the refit's public surface loads neither scipy nor litellm until a refit runs."""

from __future__ import annotations

import subprocess
import sys


def test_importing_refit_contract_and_sources_does_not_import_scipy() -> None:
    """`import handoffmon.refit` (records, refit()) and the sources stay light."""
    code = (
        "import sys, handoffmon.refit, handoffmon.sources.csv, "
        "handoffmon.sources.prometheus; "
        "print(sorted(m for m in ('scipy', 'litellm', 'prometheus_client') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
