"""handoffmon.testing: the helpers users test their rules and exporters with behave as documented."""

from __future__ import annotations

import subprocess
import sys

from prometheus_client import CollectorRegistry, generate_latest

from handoffmon import Monitor
from handoffmon.config import config_from_mapping
from handoffmon.exporters.prometheus import PrometheusExporter
from handoffmon.protocols import Exporter
from handoffmon.stores.memory import MemoryStore
from handoffmon.testing import FakeClock, RecordingExporter, make_turn_result, simulated_fleet
from tests.pipeline.helpers import run_conversation


def test_importing_testing_loads_no_litellm() -> None:
    """`import handoffmon.testing` stays light: no litellm until simulated_fleet() is called."""
    code = "import sys, handoffmon.testing; print('litellm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_recording_exporter_keeps_every_turn_and_counts_verdicts() -> None:
    """Attached to a Monitor, it receives each turn once, and verdicts() tallies (rule, verdict)."""
    rec = RecordingExporter()
    assert isinstance(rec, Exporter)
    cfg = config_from_mapping(
        {"rules": [{"name": "short", "check": "length", "params": {"unit": "words", "max": 3}}]}
    )
    with Monitor(cfg, exporters=[rec], store=MemoryStore()) as m:
        run_conversation(m, ["a", "b", "a"], replies=["ok", "far too many words here", "fine"])
        assert m.flush(10)
    assert [r.record.author for r in rec.results] == ["a", "b", "a"]
    assert rec.verdicts() == {("short", "pass"): 2, ("short", "fail"): 1}
    assert rec.verdicts("other") == {}
    assert rec.shut and rec.flushed >= 1


def test_fake_clock_drives_store_expiry() -> None:
    """A memory store on a FakeClock forgets an entry once the clock passes its TTL, without sleeping."""
    from handoffmon.protocols import Authorship

    clock = FakeClock(1000.0)
    store = MemoryStore(ttl_s=10, clock=clock)
    store.put_many([("k", Authorship(("gpt",), 1, clock()))])
    assert clock.advance(9) == 1009.0
    assert store.get_many(["k"])[0] is not None
    clock.advance(2)
    assert store.get_many(["k"]) == [None]


def test_make_turn_result_exports_like_a_pipeline_turn() -> None:
    """A hand-built handoff turn shows up in the Prometheus exporter under its labels."""
    exp = PrometheusExporter(CollectorRegistry())
    result = make_turn_result(depth=3, author="claude", prefix_model="gpt", checks=[("json", "fail")])
    assert result.record.handoff is True and result.depth_bucket == "3-4"
    assert exp.export(result)
    text = generate_latest(exp.registry).decode()
    assert 'handoffmon_turns_total{depth_bucket="3-4",model="claude",prefix_model="gpt"} 1.0' in text
    assert 'rule="json",verdict="fail"} 1.0' in text


def test_simulated_fleet_drives_real_handoffs_through_a_wrapped_router() -> None:
    """A small fleet behind a real litellm Router, wrapped: every turn recorded, handoffs among them."""
    import handoffmon

    with simulated_fleet(models=3, rules=2, seed=3) as sim:
        rec = RecordingExporter()
        config = sim.config(
            rules=[{"name": "tiny", "check": "length", "params": {"unit": "words", "max": 5}}]
        )
        assert [r.name for r in config.rules][-1] == "tiny" and len(config.rules) == 3
        runtime = handoffmon.build_runtime(config, registry=None, exporters=[rec])
        client = handoffmon.wrap(sim.router, runtime=runtime)
        stats = sim.drive(client, conversations=12, seed=1)
        assert client.monitor.flush(30)
        runtime.close()
    assert stats.turns == len(rec.results) > 12
    assert {r.record.author for r in rec.results} <= set(sim.fleet.names)
    assert any(r.record.handoff for r in rec.results)
    assert {rule for rule, _ in rec.verdicts()} == {r.name for r in config.rules}
