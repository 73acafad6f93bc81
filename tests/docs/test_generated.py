"""The generated reference pages and the performance table match the code and the benchmark JSON."""

from __future__ import annotations

import importlib.util
import re
from types import ModuleType

from prometheus_client import CollectorRegistry

from handoffmon.exporters.prometheus import PrometheusExporter
from handoffmon.exporters.store_failures import StoreStatsCollector
from handoffmon.pipeline.worker import ByteBudget
from handoffmon.proxy.metrics import ProxyMetrics
from handoffmon.testing import make_turn_result
from tests.docs.snippets import DOCS, ROOT


def gen_docs() -> ModuleType:
    """scripts/gen_docs.py, imported from its path (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("handoffmon_gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_pages_match_the_code() -> None:
    """Configuration, metrics, CLI, refit.json and the benchmark table: no drift from their sources."""
    gen = gen_docs()
    stale = sorted(str(p.relative_to(ROOT)) for p in gen.drifted())
    assert not stale, f"generated docs are stale: {', '.join(stale)}; regenerate with: {gen.COMMAND}"


def test_config_fields_all_have_a_description() -> None:
    """Every config key has text in the reference (an attribute docstring in handoffmon/config.py)."""
    page = (DOCS / "reference" / "configuration.md").read_text(encoding="utf-8")
    empty = re.findall(r"^\| `([\w.\[\]]+)` \|[^\n]*\| $", page, flags=re.M)
    assert not empty, f"config keys without a docstring in handoffmon/config.py: {empty}"


def _exposed(registry: CollectorRegistry) -> set[str]:
    return {f"{f.name}_total" if f.type == "counter" else f.name for f in registry.collect()}


def test_metrics_reference_lists_every_series_a_running_exporter_exposes() -> None:
    """Cross-check without the generator: families seen after real exports are exactly the table's."""
    from handoffmon.depth import DepthBuckets
    from handoffmon.refit import refit
    from handoffmon.sim import default_fleet
    from handoffmon.sim.offline import simulate_counts

    exp = PrometheusExporter(CollectorRegistry())
    exp.export(make_turn_result(checks=[("r", "pass")], transitions=[("r", "pass", "pass")], fallbacks=1))
    exp.observe_overhead("begin", 0.1)
    exp.count_error("export")
    exp.count_drop()
    from handoffmon.counts import Counts
    from handoffmon.shadow.recorder import PairRecorder

    pairs = PairRecorder()  # shadow pairs give their counters and the switch-cost gauges
    counts = simulate_counts(default_fleet(), 100, seed=3)
    a, b = (m.name for m in default_fleet().models[:2])
    for i in range(60):
        increments = pairs.add(f"c{i}", a, b, i % 2 == 0, {"r": (i % 3 != 0, i % 4 != 0)})
        exp.count_shadow(increments)
        counts = counts.merge(Counts(shadow=increments))
    assert exp.publish_refit(refit(counts, buckets=DepthBuckets()))
    proxy = CollectorRegistry()
    ProxyMetrics(proxy, ByteBudget(1))
    proxy.register(
        StoreStatsCollector(lambda: {"get_errors": 1}, lambda: {"conversations": 0}, lambda: {"get": 2})
    )
    # a runtime with routing.enabled registers the routing policy's series beside the exporter
    from handoffmon.config import RoutingConfig
    from handoffmon.exporters.routing_decisions import RoutingCollector
    from handoffmon.routing import PairRiskTable, RoutingState

    state = RoutingState(RoutingConfig(enabled=True))
    state.holder.table = PairRiskTable({}, created_at=0.0)
    proxy.register(RoutingCollector(state.counts.snapshot, state.table_age_s))
    # and with shadow.enabled the shadow runner's
    from handoffmon.config import ShadowConfig
    from handoffmon.exporters.shadow_calls import ShadowCollector
    from handoffmon.runtime.shadow import ShadowRunner

    runner = ShadowRunner(ShadowConfig(enabled=True, targets=["b"]), start=False)
    proxy.register(ShadowCollector(lambda: runner.stats))
    # and with telemetry.metrics_port, what that server closed unserved
    from handoffmon.exporters.serving import RefusalsCollector

    proxy.register(RefusalsCollector(lambda: {"busy": 0}))
    # and a failed `refit --pushgateway` pushes its own gauge, which RefitFailing reads
    from handoffmon.cli.refit_cmd import failure_registry

    pushed = _exposed(failure_registry(0.0))
    page = (DOCS / "reference" / "metrics.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `(handoffmon_\w+)` \|", page, flags=re.M))
    assert documented == _exposed(exp.registry) | _exposed(proxy) | pushed
    assert "handoffmon_refit_last_failure_timestamp_seconds" in pushed


def test_metrics_reference_lists_every_error_stage_an_exporter_exposes() -> None:
    """The `stage` values documented for the error counter are exactly those a fresh exporter
    exposes at 0 (the hand-written list had lost `shadow`)."""
    exp = PrometheusExporter(CollectorRegistry())
    exposed = {
        s.labels["stage"]
        for family in exp.registry.collect()
        if family.name == "handoffmon_monitor_errors"
        for s in family.samples
        if s.name == "handoffmon_monitor_errors_total"
    }
    page = (DOCS / "reference" / "metrics.md").read_text(encoding="utf-8")
    line = next(x for x in page.splitlines() if x.startswith("On `handoffmon_monitor_errors_total`, `stage`"))
    documented = set(re.findall(r"`(\w+)`", line.split(": ", 1)[1]))
    assert "shadow" in exposed and documented == exposed


def test_config_reference_types_close_every_code_span() -> None:
    """In the generated type column every alternative (between escaped pipes) closes the code
    spans it opens: a `list[Literal]` rendered as list[handoff` \\| `no_handoff] before."""
    page = (DOCS / "reference" / "configuration.md").read_text(encoding="utf-8")
    block = page.split("<!-- generated:config -->", 1)[1].split("<!-- /generated:config -->", 1)[0]
    types = [re.split(r"(?<!\\)\|", row)[2] for row in block.splitlines() if row.startswith("| `")]
    assert "list[`handoff` \\| `no_handoff`]" in {t.strip() for t in types}
    odd = [t for t in types for part in t.split("\\|") if part.count("`") % 2]
    assert not odd, odd


def test_performance_page_reads_the_newest_checked_in_runner_json() -> None:
    """The table's source line names the newest JSON under docs/operations/benchmarks/."""
    newest = sorted((DOCS / "operations" / "benchmarks").glob("*.json"))[-1]
    page = (DOCS / "operations" / "performance.md").read_text(encoding="utf-8")
    assert f"(benchmarks/{newest.name})" in page
    assert "| overhead |" in page and "| proxy |" in page and "load average" in page


def test_cli_reference_has_no_help_paragraph_markdown_reads_as_code() -> None:
    """A command's docstring indents its later paragraphs; copied as is, Markdown rendered each as
    a code block (every command's second paragraph in the CLI reference)."""
    text = gen_docs().cli_block()
    outside_fences = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    indented = [line for line in outside_fences.splitlines() if line.startswith("    ") and line.strip()]
    assert indented == [], indented[:3]
