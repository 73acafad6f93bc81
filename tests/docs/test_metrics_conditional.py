"""metrics.md marks the rows a default monitor never exports (features off by default)."""

from __future__ import annotations

import dataclasses
import re

from handoffmon.exporters.prometheus import PrometheusExporter
from handoffmon.exporters.refit_series import REFIT_GAUGES
from handoffmon.pipeline.state import ConversationState
from handoffmon.testing import make_turn_result
from tests.docs.test_generated import gen_docs
from tests.pipeline.helpers import make_config, runtime


def test_rows_a_default_monitor_never_exports_are_marked() -> None:
    """A runtime with default config, after turns (a fallback, transitions, attributions), its own
    errors, drops and overheads, a clean turn: every table row it does not expose is either a refit gauge
    (published by the refit) or marked 'Only with `<feature>.enabled`', and
    no row it does expose is marked."""
    rt = runtime(make_config(refit={"interval_s": 0}))
    try:
        (prom,) = [e for e in rt.monitor.exporters if isinstance(e, PrometheusExporter)]
        prom.export(
            make_turn_result(
                depth=2,
                prefix_model="a",
                checks=[("r", "pass")],
                transitions=[("r", "pass", "pass")],
                fallbacks=1,
            )
        )
        own = make_turn_result(depth=3, author="a", prefix_model="a", checks=[("r", "pass")])
        _, cluster = ConversationState().tally("a", "a", True, own.checks)
        prom.export(dataclasses.replace(own, clean=True, cluster=cluster))  # baseline and cell sums
        prom.export(make_turn_result(checks=[("r", "error")]))  # check errors by reason
        prom.observe_overhead("begin", 1e-5)
        prom.count_error("export")
        prom.count_drop()
        exposed = set()
        for family in rt.registry.collect():
            if family.samples:
                exposed.add(f"{family.name}_total" if family.type == "counter" else family.name)
    finally:
        rt.close()
    rows = re.findall(
        r"^\| `(handoffmon_[a-z0-9_]+)` \| \w+ \| [^|]*(?:\\\|[^|]*)*\| (.*) \|$",
        gen_docs().monitor_metrics_block(),
        re.M,
    )
    assert len(rows) > 30
    for name, doc in rows:
        marked = doc.startswith("*Only with `") and (
            ".enabled`.*" in doc or "`telemetry.metrics_port`.*" in doc
        )
        if name in exposed:
            assert not marked, name
        else:
            refit = name in {spec.name for spec in REFIT_GAUGES}
            assert marked or refit, f"{name} is not exported by default but not marked"
    assert {n for n, d in rows if d.startswith("*Only with `shadow.enabled`")} >= {
        "handoffmon_shadow_calls_total",
        "handoffmon_shadow_pair_stats_total",
    }
