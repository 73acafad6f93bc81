"""Name flood: a new model, rule and conversation name on every request; memory stays bounded.

Runs ``tests/reliability/name_flood.py`` in a subprocess (its own RSS, nothing else in it).
Default run: 2,000 requests with small caps (500 conversations, 500 pending replies, 1 MB of
text), so every bounded structure is full by the half-way sample: the second half must not
grow (≤ 8 MiB, the soak's tolerance), names are capped in the aggregates and labels, and
every turn is counted. Slow run: 200,000 requests with the shipped defaults, under the
resident-memory bound the docs state (docs/operations/reliability.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
FLAT_MIB = 8.0
"""Growth allowed over the second half of a run whose caps are all reached in the first."""
DEFAULTS_BOUND_MIB = 1024.0
"""Peak RSS of a 200,000-request name flood with the default caps (see the docs for the measurement)."""


def _flood(requests: int, *args: str, timeout_s: float) -> dict[str, Any]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.reliability.name_flood", str(requests), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report


def _assert_names_capped(report: dict[str, Any]) -> None:
    assert report["turns"] + report["dropped"] == report["requests"]
    assert report["models"] <= 50 + 2  # the cap + none/other (every reply has a new model name)
    assert report["rules"] <= 100 + 1  # the cap + other
    assert report["label_usage"]["model"] == [50, 50]
    assert report["label_overflows"]["model"] > 0
    assert report["monitor_errors"].get("rules", 0) == report["turns"] - 256  # request_rules.max_names
    assert report["refits"]["runs"] >= 1 and report["refits"]["failures"] == 0


@pytest.mark.slow
def test_a_name_flood_with_small_caps_plateaus() -> None:
    report = _flood(2_000, "small", timeout_s=400)
    _assert_names_capped(report)
    rss = report["rss_mib"]
    assert rss[-1] - rss[5] <= FLAT_MIB, rss


@pytest.mark.slow
@pytest.mark.exclusive
def test_a_200k_name_flood_with_the_default_caps_stays_under_the_stated_bound() -> None:
    report = _flood(200_000, timeout_s=7200)
    _assert_names_capped(report)
    assert report["peak_mib"] <= DEFAULTS_BOUND_MIB, report["rss_mib"]
