"""``handoffmon_store_evictions_total{what}`` (what the memory store's caps dropped) and
``handoffmon_store_operations_total{op}`` (the store guard's calls), in Prometheus and OTel alike,
wired by the runtime without hand wiring."""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import generate_latest

from handoffmon.config import HandoffmonConfig
from handoffmon.runtime import build_runtime
from handoffmon.stores.memory import MemoryStore
from tests.exporters.test_otel import points
from tests.pipeline.helpers import run_conversation


def _samples(text: str, name: str) -> dict[str, float]:
    prefix = f"{name}{{"
    return {
        line.split("}")[0][len(prefix) :]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(prefix)
    }


def test_conversation_and_key_evictions_are_exported_by_both_exporters() -> None:
    """A memory store capped at 2 conversations and 4 keys each: five conversations of three
    turns (2 keys per turn) evict at least 3 conversations (keys stored without a conversation
    id are groups of their own) and, within each, the keys past 4; both exporters report
    exactly the store's own tallies."""
    config = HandoffmonConfig.model_validate(
        {
            "store": {"backend": "memory", "max_conversations": 2, "max_keys_per_conversation": 4},
            "telemetry": {"prometheus": True, "otel": True},
        }
    )
    reader = InMemoryMetricReader()
    rt = build_runtime(config, registry=None, meter_provider=MeterProvider(metric_readers=[reader]))
    try:
        for i in range(5):
            run_conversation(rt.monitor, ["a", "b", "a"], user=f"conversation {i}")
        assert rt.flush(10)
        store = rt.monitor.store.inner
        assert isinstance(store, MemoryStore)
        prom = _samples(generate_latest(rt.registry).decode(), "handoffmon_store_evictions_total")
        otel = {k[0][1]: p.value for k, p in points(reader, "handoffmon_store_evictions").items()}
    finally:
        rt.close()
    assert store.evicted >= 3 and len(store._groups) <= 2
    assert store.evicted_keys > 0
    expected = {"conversations": store.evicted, "keys": store.evicted_keys}
    assert prom == {f'what="{k}"': float(v) for k, v in expected.items()}
    assert otel == expected


def test_a_store_without_caps_of_its_own_has_no_eviction_series(tmp_path: object) -> None:
    """SQLite expires by TTL and evicts nothing itself: no evictions family, failures still there."""
    config = HandoffmonConfig.model_validate(
        {"store": {"backend": "sqlite", "path": f"{tmp_path}/store.db"}, "telemetry": {"prometheus": True}}
    )
    rt = build_runtime(config, registry=None)
    try:
        run_conversation(rt.monitor, ["a", "b"])
        assert rt.flush(10)
        text = generate_latest(rt.registry).decode()
    finally:
        rt.close()
    assert "handoffmon_store_failures_total{" in text
    assert "handoffmon_store_evictions" not in text


def test_store_operations_are_exported_by_both_exporters_on_every_backend(tmp_path: object) -> None:
    """Memory and SQLite behind the runtime's guard: both exporters report exactly the guard's
    ``operations()``, under the ``op`` values of the failures counter (so the ratio joins)."""
    for store in ({"backend": "memory"}, {"backend": "sqlite", "path": f"{tmp_path}/store.db"}):
        config = HandoffmonConfig.model_validate(
            {"store": store, "telemetry": {"prometheus": True, "otel": True}}
        )
        reader = InMemoryMetricReader()
        rt = build_runtime(config, registry=None, meter_provider=MeterProvider(metric_readers=[reader]))
        try:
            run_conversation(rt.monitor, ["a", "b", "a"])
            assert rt.flush(10)
            want = rt.monitor.store.operations()  # type: ignore[attr-defined]
            text = generate_latest(rt.registry).decode()
            prom = _samples(text, "handoffmon_store_operations_total")
            otel = {k[0][1]: p.value for k, p in points(reader, "handoffmon_store_operations").items()}
        finally:
            rt.close()
        assert want["get"] > 0 and want["put_state"] > 0, want
        assert prom == {f'op="{op}"': float(n) for op, n in want.items()}, store
        assert otel == want, store
        failed_ops = {
            k.split('op="')[1].split('"')[0] for k in _samples(text, "handoffmon_store_failures_total")
        }
        assert set(want) <= failed_ops  # every op has its failures' series to divide
