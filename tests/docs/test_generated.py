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
    proxy.register(StoreStatsCollector(lambda: {"get_errors": 1}))
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
    page = (DOCS / "reference" / "metrics.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `(handoffmon_\w+)` \|", page, flags=re.M))
    assert documented == _exposed(exp.registry) | _exposed(proxy)


def test_performance_page_reads_the_newest_checked_in_runner_json() -> None:
    """The table's source line names the newest JSON under docs/operations/benchmarks/."""
    newest = sorted((DOCS / "operations" / "benchmarks").glob("*.json"))[-1]
    page = (DOCS / "operations" / "performance.md").read_text(encoding="utf-8")
    assert f"(benchmarks/{newest.name})" in page
    assert "| overhead |" in page and "| proxy |" in page and "load average" in page
