"""The recorded demo snapshots (``tests/deploy/data/demo-*.prom``) are what today's code records.

The alerting tests replay them into a real Prometheus and Alertmanager, so a snapshot older than
the code tests yesterday's series: it lacked ``handoffmon_responses_without_reply_total`` and the
refit gauges' ``fit`` label, and its Δ intervals were narrower than today's refit computes from the
same counts (dd9b182), so the replayed per-rule alerts fired where today's would not.

* Default suite (no traffic, no litellm, about a second): the snapshot's counters, read by the
  Prometheus source and refitted by today's refit, publish through a runtime built as the demo
  builds it the same metric families (names and types) and the same refit series with the same
  values as the snapshot holds.
* Slow: the fleets' recording (``python -m tests.deploy.demo_fleets``) is seeded and its series
  are a function of the code: a fresh recording equals the snapshot sample for sample, apart from
  the series that time the pipeline (``TIMING``).

When one fails, re-record with ``python -m tests.deploy.demo_fleets`` and check that the e2e
tests in this directory still pass (``pytest -m '' tests/deploy``).
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from handoffmon.exporters import refit_publisher
from handoffmon.exporters.refit_series import REFIT_GAUGES
from handoffmon.refit import refit
from handoffmon.sim.demo import DemoSettings, demo_config
from handoffmon.sources.prometheus import PrometheusSource
from tests.deploy.demo_fleets import FLEETS, SNAPSHOTS, record
from tests.deploy.replay import REFIT_TIMESTAMP

REFIT_FAMILIES = frozenset(spec.name for spec in REFIT_GAUGES)
TIMING = frozenset(
    {
        "handoffmon_check_seconds_total",
        "handoffmon_overhead_seconds_bucket",
        "handoffmon_overhead_seconds_sum",
        "handoffmon_store_operations_total",
        REFIT_TIMESTAMP,
        "handoffmon_build_info",
    }
)
"""Samples that time the recording rather than count its traffic: check and pipeline durations,
the refit's wall-clock time, the store's reads (their number varied by 0.2% between two
recordings), and the package version."""
REL_TOL = 1e-9
"""The refit is deterministic arithmetic on the same counts; only BLAS summation order may differ."""

Key = tuple[str, tuple[tuple[str, str], ...]]


def _families(text: str) -> dict[str, str]:
    return {f.name: f.type for f in text_string_to_metric_families(text)}


def _samples(text: str) -> dict[Key, float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if not s.name.endswith("_created")
    }


SUM_BY = re.compile(r"^sum(?: by \(([a-z_, ]*)\))? ?\((\w+)\)$")


def _snapshot_fetch(samples: dict[Key, float]) -> Any:
    """A Prometheus ``/api/v1/query`` answering the source's ``sum by (...) (metric)`` queries
    from the snapshot's samples (a Prometheus that scraped it once)."""

    def fetch(url: str, params: dict[str, str]) -> Any:
        m = SUM_BY.match(params["query"])
        assert m and url.endswith("/api/v1/query"), (url, params)
        by = [b.strip() for b in (m.group(1) or "").split(",") if b.strip()]
        sums: dict[tuple[str, ...], float] = {}
        for (name, labels), value in samples.items():
            if name == m.group(2):
                found = dict(labels)
                key = tuple(found.get(b, "") for b in by)
                sums[key] = sums.get(key, 0.0) + value
        result = [{"metric": dict(zip(by, k, strict=True)), "value": [0, repr(v)]} for k, v in sums.items()]
        return {"status": "success", "data": {"resultType": "vector", "result": result}}

    return fetch


def _refit_published(name: str, text: str) -> str:
    """The snapshot's counters refitted today and published through a runtime built from the
    demo's config (as ``demo_fleets`` builds it, without traffic): the exposition text."""
    from handoffmon.runtime import build_runtime

    fleet = FLEETS[name]()
    config = demo_config(fleet, "sim", DemoSettings(models=len(fleet.models), rules=len(fleet.rules)))
    counts = PrometheusSource("http://snapshot", fetch=_snapshot_fetch(_samples(text))).snapshot()
    assert counts.total_turns > 0
    result = refit(counts, buckets=config.buckets, settings=config.refit, source="snapshot")
    registry = CollectorRegistry()
    runtime = build_runtime(config, registry=registry)
    try:
        assert refit_publisher(runtime.exporters)(result)
        return generate_latest(registry).decode()
    finally:
        runtime.close()


def _mismatches(recorded: dict[Key, float], today: dict[Key, float]) -> list[str]:
    out = [f"only in the snapshot: {k}" for k in sorted(set(recorded) - set(today))]
    out += [f"not in the snapshot: {k}" for k in sorted(set(today) - set(recorded))]
    for k in sorted(set(recorded) & set(today)):
        a, b = recorded[k], today[k]
        if not (math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))):
            out.append(f"{k}: snapshot {a!r}, today {b!r}")
    return out


@pytest.mark.parametrize("name", sorted(SNAPSHOTS))
def test_snapshot_has_the_families_and_refit_series_the_code_exports_today(name: str) -> None:
    """Same metric families and types as a runtime built today; every refit series equal to what
    today's refit publishes from the snapshot's own counters."""
    text = SNAPSHOTS[name].read_text(encoding="utf-8")
    today = _refit_published(name, text)
    assert _families(text) == _families(today), "re-record: python -m tests.deploy.demo_fleets"
    recorded, fresh = _samples(text), _samples(today)

    def refit_series(samples: dict[Key, float]) -> dict[Key, float]:
        return {k: v for k, v in samples.items() if k[0] in REFIT_FAMILIES and k[0] != REFIT_TIMESTAMP}

    assert len(refit_series(recorded)) >= 100  # Δ, risk, π/σ, Markov, μ for 2 pairs × 5 fits
    problems = _mismatches(refit_series(recorded), refit_series(fresh))
    assert not problems, "re-record: python -m tests.deploy.demo_fleets\n" + "\n".join(problems[:40])


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", sorted(SNAPSHOTS))
def test_a_fresh_recording_equals_the_snapshot(name: str) -> None:
    """The recording is seeded (conversations, replies, injected failures): recorded again today,
    every sample but the timing ones equals the committed snapshot (counters exactly)."""
    recorded = _samples(SNAPSHOTS[name].read_text(encoding="utf-8"))
    fresh = _samples(record(name))

    def counted(samples: dict[Key, float]) -> dict[Key, float]:
        return {k: v for k, v in samples.items() if k[0] not in TIMING}

    assert len(counted(recorded)) >= 1000
    problems = _mismatches(counted(recorded), counted(fresh))
    assert not problems, "re-record: python -m tests.deploy.demo_fleets\n" + "\n".join(problems[:40])
